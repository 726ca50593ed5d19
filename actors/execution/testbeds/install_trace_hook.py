"""What a testbed's install reads, as the install's own interpreters see it.

Copied into the testbed's prefix (with a .pth file that imports it) only while its install steps
run, so every Python process of the install (pip, its build subprocesses, setup.py) loads it at
start-up, and the .pth line starts it with the trace's folder and roots (prefix.start_hooks
writes them in: the hook reads nothing of the install's environment). An audit hook (PEP 578)
then notes, once each, in FOLDER/PID.trace:

    start   the process's interpreter version
    read    a path under a ROOTS folder opened for reading (or tried: a missing one)
    write   a path there opened for writing
    list    a folder there listed by the tools (setuptools, pip): its structure is what matters
    listall a folder there listed by the project's own code (setup.py's glob): its names matter
    run     a program started: [executable, argv, cwd]

Written for every interpreter an environment may have (no f-strings); below Python 3.8 there are
no audit hooks, and the process says so ("untraced"), which rules its install out of reuse."""
import os
import sys


def start(folder, roots):
    roots = [r.rstrip("/") for r in roots if r]
    if not folder or not roots:
        return
    try:
        fd = os.open(os.path.join(folder, "%d.trace" % os.getpid()), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        return  # no trace, no reuse: the build goes on as it would without it
    seen = set()

    def note(kind, text):
        line = kind + "\t" + text.replace("\n", "\\n") + "\n"
        if line not in seen:
            seen.add(line)
            os.write(fd, line.encode("utf-8", "surrogateescape"))

    if not hasattr(sys, "addaudithook"):
        note("untraced", sys.version.split()[0])
        return
    note("start", sys.version.split()[0])
    python_home = os.path.dirname(os.__file__)

    def place(path):
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):
            return None  # a descriptor
        full = os.path.normpath(os.path.join(os.getcwd(), path))
        for root in roots:
            if full == root:
                return "."
            if full.startswith(root + "/"):
                return full[len(root) + 1:]
        return None

    def listed_by_the_project():
        """Whether the innermost caller outside the standard library (glob, os.walk, pathlib)
        is the project's own code (setup.py and what it imports) rather than a tool's."""
        frame = sys._getframe(2)
        while frame is not None:
            filename = frame.f_code.co_filename
            standard = filename.startswith("<frozen") or (filename.startswith(python_home) and "site-packages" not in filename)
            if not standard:
                return place(filename) is not None or filename.startswith("<")
            frame = frame.f_back
        return False

    def hook(event, args):
        try:
            if event == "open":
                path, mode, flags = args
                where = place(path)
                if where is not None:
                    writes = (mode is not None and any(c in mode for c in "wax+")) or bool(flags & (os.O_WRONLY | os.O_RDWR))
                    note("write" if writes else "read", where)
            elif event in ("os.listdir", "os.scandir"):
                where = place(args[0] if args[0] is not None else ".")
                if where is not None:
                    note("listall" if listed_by_the_project() else "list", where)
            elif event == "subprocess.Popen":
                executable, argv, cwd = args[0], args[1], args[2]
                argv = [argv] if isinstance(argv, (str, bytes)) else list(argv)
                note("run", repr([os.fsdecode(executable) if executable else None,
                                  [os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in argv],
                                  os.fsdecode(cwd) if cwd else os.getcwd()]))
            elif event in ("os.exec", "os.posix_spawn", "os.spawn"):
                argv = list(args[1]) if len(args) > 1 and isinstance(args[1], (list, tuple)) else []
                note("run", repr([os.fsdecode(args[0]) if isinstance(args[0], (str, bytes)) else str(args[0]),
                                  [os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in argv], os.getcwd()]))
            elif event == "os.system":
                note("run", repr(["/bin/sh", ["/bin/sh", "-c", os.fsdecode(args[0])], os.getcwd()]))
        except Exception as exc:  # a trace that failed must not fail the install, only its reuse
            note("error", repr(exc))

    sys.addaudithook(hook)
