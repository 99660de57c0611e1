/* Wine 8.0 has no ProcessPrng, which the standard library of Rust >= 1.78
 * calls at start-up: without this DLL in the prefix's system32 every Rust
 * program exits 53 at once. RtlGenRandom (advapi32's SystemFunction036)
 * gives the same bytes ProcessPrng would. Built by .ci/windows.sh. */
#include <windows.h>
#include <ntsecapi.h>

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    return RtlGenRandom(data, (ULONG)len);
}

BOOL WINAPI DllMain(HINSTANCE instance, DWORD reason, LPVOID reserved)
{
    (void)instance;
    (void)reason;
    (void)reserved;
    return TRUE;
}
