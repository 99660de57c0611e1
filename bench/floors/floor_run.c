/* bench/floors/floor_run.c: the floor of a lock-and-run tool.
 *
 *   floor_run LOCKFILE COMMAND [ARG]...
 *
 * What any tool must do to run COMMAND under an exclusive flock(2) on
 * LOCKFILE, and nothing more: open (creating it), flock (waiting in the
 * kernel), vfork + execvp, waitpid, exit with the command's status. No
 * record, no signal forwarding, no messages. Built static by
 * bench/floors/build.sh, so that the dynamic loader's start-up is not
 * counted against the floor; bench/compare.sh times it beside lockrun and
 * flock(1) as the row's floor.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 3) {
    fputs("usage: floor_run LOCKFILE COMMAND [ARG]...\n", stderr);
    return 64;
  }
  int fd = open(argv[1], O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY, 0666);
  if (fd < 0) {
    perror(argv[1]);
    return 66;
  }
  while (flock(fd, LOCK_EX) != 0) {
    perror("flock");
    return 71;
  }
  pid_t pid = vfork();
  if (pid < 0) {
    perror("vfork");
    return 71;
  }
  if (pid == 0) {
    execvp(argv[2], argv + 2);
    _exit(127);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
