/* bench/floors/floor_slots.c: the floor of a tool that runs at most N
 * commands at once, with lockrun --slots' guarantees (kernel waits, no
 * stampede, about first come first served).
 *
 *   floor_slots N LOCKFILE COMMAND [ARG]...
 *
 * LOCKFILE is the queue: a waiter takes an exclusive flock(2) on it (a
 * kernel wait), so only the head contends for the slots LOCKFILE.1 ..
 * LOCKFILE.N. The head tries each without waiting; when all are full it
 * blocks in flock(2) on every slot at once, one thread per slot, until the
 * first gets one; the others are interrupted (SIGUSR1, no SA_RESTART:
 * EINTR) and give back any slot they got in that instant. With its slot
 * the head lets go of the queue and runs the command (vfork + execvp),
 * holding the slot until it exits. No record, no messages: what lockrun
 * --slots does beyond this is its own cost. Built by bench/floors/build.sh.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_SLOTS 1024

static int slot_fd[MAX_SLOTS];
static pthread_t slot_thread[MAX_SLOTS];
static int won = -1;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static void on_interrupt(int sig) { (void)sig; }

static void *wait_slot(void *arg) {
  int k = (int)(long)arg;
  int got = flock(slot_fd[k], LOCK_EX) == 0;
  pthread_mutex_lock(&mu);
  if (got && won < 0) {
    won = k;
    pthread_cond_signal(&cv);
  } else if (got) {
    flock(slot_fd[k], LOCK_UN); /* another thread won: give it back */
  }
  pthread_mutex_unlock(&mu);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fputs("usage: floor_slots N LOCKFILE COMMAND [ARG]...\n", stderr);
    return 64;
  }
  int n = atoi(argv[1]);
  if (n < 1 || n > MAX_SLOTS) {
    fputs("floor_slots: N from 1 to 1024\n", stderr);
    return 64;
  }
  int queue = open(argv[2], O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (queue < 0) {
    perror(argv[2]);
    return 66;
  }
  size_t len = strlen(argv[2]) + 16;
  char *name = malloc(len);
  for (int k = 0; k < n; k++) {
    snprintf(name, len, "%s.%d", argv[2], k + 1);
    slot_fd[k] = open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (slot_fd[k] < 0) {
      perror(name);
      return 66;
    }
  }
  if (flock(queue, LOCK_EX) != 0) {
    perror("flock");
    return 71;
  }
  for (int k = 0; k < n && won < 0; k++)
    if (flock(slot_fd[k], LOCK_EX | LOCK_NB) == 0) won = k;
  if (won < 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt; /* no SA_RESTART: flock returns EINTR */
    sigaction(SIGUSR1, &sa, NULL);
    for (int k = 0; k < n; k++) pthread_create(&slot_thread[k], NULL, wait_slot, (void *)(long)k);
    pthread_mutex_lock(&mu);
    while (won < 0) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    for (int k = 0; k < n; k++)
      if (k != won) pthread_kill(slot_thread[k], SIGUSR1);
    for (int k = 0; k < n; k++) pthread_join(slot_thread[k], NULL);
  }
  flock(queue, LOCK_UN);
  pid_t pid = vfork();
  if (pid < 0) {
    perror("vfork");
    return 71;
  }
  if (pid == 0) {
    execvp(argv[3], argv + 3);
    _exit(127);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
