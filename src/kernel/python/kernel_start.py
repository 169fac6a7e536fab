"""Starts airlock's Python kernel program (airlock_kernel.py, installed beside this file as
kernel-program.py) from its bytecode, compiled when airlockd was built (kernel-program.pyc),
when this interpreter reads that bytecode; else from its source. Compiling the program here
would leave ~1 MB more in an idle kernel's memory for its whole life (the compiler's heap)."""

import marshal
import sys
from importlib._bootstrap_external import MAGIC_NUMBER  # loaded already at every start


def program_code(base):
    try:
        with open(base + ".pyc", "rb") as f:
            data = f.read()
        if data[:4] == MAGIC_NUMBER:  # then the 16-byte header, then the code
            return marshal.loads(memoryview(data)[16:])
    except (OSError, ValueError, EOFError, TypeError):  # absent, or not this Python's
        pass
    with open(base + ".py", "rb") as f:
        return compile(f.read(), base + ".py", "exec")


if __name__ == "__main__":
    base = __file__.rpartition("/")[0] + "/kernel-program"
    code = program_code(base)
    sys.argv[0] = base + ".py"
    del program_code, marshal, MAGIC_NUMBER  # nothing of the launcher stays in __main__
    exec(code, {"__name__": "__main__", "__file__": base + ".py", "__builtins__": __builtins__})
