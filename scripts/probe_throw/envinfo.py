"""Environment facts for the throw probe: torch build, the flags torch's cpp_extension would
add, Python's sysconfig flags (setup.py builds use them), and, inside a live process after
importing torch (and convt2d / a probe module when given), which libraries provide the C++
exception runtime and unwinder.

usage: python envinfo.py [--import-main] [--probe-dir DIR --probe-mod NAME]
"""
import ctypes
import inspect
import os
import re
import subprocess
import sys
import sysconfig

EH_SYMS = ["__cxa_throw", "__cxa_begin_catch", "__cxa_rethrow", "__cxa_get_globals",
           "__cxa_allocate_exception", "__gxx_personality_v0", "_Unwind_RaiseException",
           "_Unwind_Resume", "_Unwind_Find_FDE", "_ZSt9terminatev", "_ZSt13set_terminatePFvvE"]


def sh(cmd, timeout=60):
    try:
        r = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=timeout)
        return (r.stdout + r.stderr).strip()
    except Exception as e:  # noqa: BLE001
        return f"<{e}>"


def section(t):
    print(f"\n----- {t} -----", flush=True)


def main():
    args = sys.argv[1:]
    section("python")
    print("executable:", sys.executable)
    print("version:", sys.version.replace("\n", " "))
    print("glibc:", os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else "?")
    print("dlopenflags:", sys.getdlopenflags())

    section("environment variables")
    for k in ["LD_PRELOAD", "LD_LIBRARY_PATH", "GLIBC_TUNABLES", "CC", "CXX", "CFLAGS",
              "CXXFLAGS", "LDFLAGS", "CUDA_HOME", "CUDA_PATH", "TORCH_CUDA_ARCH_LIST",
              "TORCH_SHOW_CPP_STACKTRACES", "TORCH_DISABLE_ADDR2LINE", "PYTHONPATH", "MAX_JOBS",
              "TORCH_EXTENSIONS_DIR", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS"]:
        print(f"{k}={os.environ.get(k, '<unset>')}")

    section("python sysconfig (setuptools compiles/links extensions with these)")
    for k in ["CC", "CXX", "LDSHARED", "LDCXXSHARED", "CFLAGS", "CCSHARED", "LDFLAGS", "OPT",
              "CONFIGURE_CFLAGS", "CONFIGURE_LDFLAGS", "SOABI", "EXT_SUFFIX"]:
        print(f"{k} = {sysconfig.get_config_var(k)}")

    import torch
    import torch.utils.cpp_extension as ce
    section("torch")
    print("torch:", torch.__version__, "file:", torch.__file__)
    print("torch.version.cuda:", torch.version.cuda, " git:", torch.version.git_version)
    print("torch._C._GLIBCXX_USE_CXX11_ABI:", torch._C._GLIBCXX_USE_CXX11_ABI)
    try:
        print("torch.compiled_with_cxx11_abi():", torch.compiled_with_cxx11_abi())
    except Exception as e:  # noqa: BLE001
        print("compiled_with_cxx11_abi: n/a", e)
    cfg = torch.__config__.show()
    print("torch.__config__.show():")
    for line in cfg.splitlines():
        line = line.rstrip()
        if "Build settings" in line:
            # keep it readable: one setting per line, CUDA_FLAGS shortened
            for part in line.split(", "):
                if part.strip().startswith("CUDA_FLAGS"):
                    part = part[:200] + " ..."
                print("     ", part.strip())
        else:
            print(line)
    m = re.search(r"C\+\+ Version: (\d+)", cfg)
    print("SUMMARY torch built with:", ", ".join(
        l.strip(" -") for l in cfg.splitlines() if re.search(r"^\s+- (GCC|clang|C\+\+ Version)", l)))
    try:
        print("torch.cuda.is_available():", torch.cuda.is_available(),
              " device_count:", torch.cuda.device_count())
    except Exception as e:  # noqa: BLE001
        print("torch.cuda: error", e)

    section("torch.utils.cpp_extension: -std flags in its source")
    src = inspect.getsource(ce)
    stds = re.findall(r"c\+\+(1[147]|2[03])", src)
    counts = {s: stds.count(s) for s in sorted(set(stds))}
    print("occurrences of c++NN:", {f"c++{k}": v for k, v in counts.items()})
    for i, line in enumerate(src.splitlines(), 1):
        if re.search(r"['\"](-std=|/std:)?c\+\+(17|20)['\"]", line) or "cpp_flag_prefix + " in line:
            print(f"  cpp_extension.py:{i}: {line.strip()}")
    default = "c++20" if re.search(r"cpp_flag_prefix \+ 'c\+\+20'", src) else (
        "c++17" if re.search(r"cpp_flag_prefix \+ 'c\+\+17'", src) else "?")
    print("SUMMARY cpp_extension default std (BuildExtension):", default)
    print("SUMMARY torch ABI flag: _GLIBCXX_USE_CXX11_ABI =", int(torch._C._GLIBCXX_USE_CXX11_ABI),
          "; cpp_extension adds -D_GLIBCXX_USE_CXX11_ABI:", "_GLIBCXX_USE_CXX11_ABI" in src)
    try:
        print("cpp_extension.CUDA_HOME:", ce.CUDA_HOME)
        print("cpp_extension.COMMON_NVCC_FLAGS:", getattr(ce, "COMMON_NVCC_FLAGS", "?"))
    except Exception as e:  # noqa: BLE001
        print(e)

    loaded = []
    if "--import-main" in args:
        try:
            import convt2d  # noqa: F401
            import convt2d._C as C
            loaded.append(C.__file__)
            print("imported convt2d._C:", C.__file__)
        except Exception as e:  # noqa: BLE001
            print("import convt2d failed:", type(e).__name__, e)
    if "--probe-dir" in args:
        d = args[args.index("--probe-dir") + 1]
        name = args[args.index("--probe-mod") + 1]
        sys.path.insert(0, d)
        try:
            mod = __import__(name)
            loaded.append(mod.__file__)
            print("imported probe module:", mod.__file__)
        except Exception as e:  # noqa: BLE001
            print("import probe module failed:", type(e).__name__, e)

    section("process after imports: C++ runtime / unwinder libraries mapped")
    maps = open("/proc/self/maps").read().splitlines()
    libs = []
    for l in maps:
        parts = l.split()
        if len(parts) >= 6 and parts[5].startswith("/") and ".so" in parts[5]:
            if parts[5] not in libs:
                libs.append(parts[5])
    print("mapped shared objects:", len(libs))
    for p in libs:
        b = os.path.basename(p)
        if re.search(r"stdc\+\+|gcc_s|unwind|c\+\+abi|libc\+\+|libsupc|libc10\.so|torch_python|"
                     r"libtorch_cpu|libpython|libcuda\.so|_C\.|probe|jemalloc|tcmalloc", b):
            print("  ", p, "->", os.path.realpath(p))
    status = open("/proc/self/status").read()
    feats = [l for l in status.splitlines() if "x86_Thread" in l or "Speculation" in l]
    print("x86 thread features (shadow stack shows as 'shstk'):", feats or "<none reported>")

    section("which library the global scope resolves each EH symbol to (dlsym RTLD_DEFAULT)")

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]
    libdl = ctypes.CDLL(None)
    dladdr = libdl.dladdr
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    dlsym = libdl.dlsym
    dlsym.restype = ctypes.c_void_p
    dlsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    for s in EH_SYMS:
        a = dlsym(None, s.encode())  # RTLD_DEFAULT == NULL
        if not a:
            print(f"  {s}: <not in global scope>")
            continue
        info = DlInfo()
        dladdr(a, ctypes.byref(info))
        print(f"  {s}: {info.dli_fname.decode() if info.dli_fname else '?'}")
    # the same lookup from the module's own scope (what its PLT may bind to)
    RTLD_NOLOAD, RTLD_LAZY = 4, 1
    dlopen = libdl.dlopen
    dlopen.restype = ctypes.c_void_p
    dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]
    for path in loaded:
        h = dlopen(path.encode(), RTLD_NOLOAD | RTLD_LAZY)
        print(f"  from {os.path.basename(path)} (dlsym on its handle):")
        for s in ["__cxa_throw", "_Unwind_RaiseException", "_Unwind_Resume", "__gxx_personality_v0"]:
            a = dlsym(h, s.encode()) if h else None
            info = DlInfo()
            if a:
                dladdr(a, ctypes.byref(info))
            print(f"     {s}: {info.dli_fname.decode() if a and info.dli_fname else '<none>'}")

    section("every mapped object that DEFINES an EH/unwinder symbol in its dynamic table")
    pat = "|".join(re.escape(s) for s in EH_SYMS)
    cmd = ("printf '%s\\n' " + " ".join(f"'{p}'" for p in libs) +
           " | xargs -P 8 -I{} sh -c \"nm -D --defined-only {} 2>/dev/null | "
           f"grep -wE '{pat}' | sed 's|^|{{}}: |'\"")
    out = sh(cmd, timeout=120)
    prov = {}
    for line in out.splitlines():
        if ": " in line:
            lib, rest = line.split(": ", 1)
            sym = rest.split()[-1].split("@")[0]
            prov.setdefault(sym, set()).add(os.path.basename(lib))
    for s in EH_SYMS:
        ps = sorted(prov.get(s, []))
        flag = "" if len(ps) <= 1 else "   <-- MORE THAN ONE PROVIDER"
        print(f"  {s}: {ps}{flag}")
    dup = [s for s in EH_SYMS if len(prov.get(s, [])) > 1]
    print("SUMMARY EH symbols with more than one provider in the process:", dup or "none")


if __name__ == "__main__":
    main()
