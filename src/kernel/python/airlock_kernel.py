"""airlock's Python kernel: a long-lived interpreter that runs notebook-style cells.

airlockd's agent starts it inside a session's sandbox as `python3 -u /airlock/kernel.py` and
talks to it over its original fd 0 (requests, one JSON object a line) and fd 1 (events, one JSON
object a line): requests {"op": "execute", "id", "code"}, {"op": "ping", "id"} (airlockd's
check after a restore: answered with a pong) and {"op": "shutdown"}; events ready, stream,
result, error, done (always a cell's last event) and pong (src/server/domain/kernels.c reads
them; docs/api.md, "Kernels", is what users see of it).

User code's fd 1 and fd 2 (and so its children's: os.system, subprocess) are pipes read by a
thread of ours that turns what arrives into `stream` events, so nothing user code writes can
corrupt the event channel. Standard library only, and nothing heavy imported at start: start-up
time is a kernel's first cell's latency.
"""

import _ast
import builtins
import codecs
import io
import json
import linecache
import os
import select
import signal
import sys
import threading
import types

# traceback and base64 are imported when first needed (an error, an image): an idle kernel's
# memory stays close to a bare interpreter's

# the file this code was compiled from (run from its bytecode by kernel_start.py, __file__ may say another)
KERNEL_FILE = (lambda: None).__code__.co_filename
STREAM_CHUNK = 64 * 1024  # at most this many bytes of output per stream event
PUMP_STACK = 256 * 1024  # the output thread's stack
MIME_METHODS = (
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
)
BINARY_MIMES = ("image/png", "image/jpeg")
# cells may `await` at top level, as in a notebook (Python 3.8+); parsed by compile() into _ast's
# nodes (the `ast` module and the enum module it imports would stay in an idle kernel's memory)
TOP_LEVEL_AWAIT = getattr(_ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
CO_COROUTINE = 0x80  # inspect.CO_COROUTINE, without importing inspect
DEBIAN_MATPLOTLIBRC = "/usr/share/matplotlib/mpl-data/matplotlibrc"


class Channel:
    """The event channel: one JSON line per event, written whole even if SIGINT arrives."""

    def __init__(self, fd):
        self.fd = fd
        self.lock = threading.Lock()

    def send(self, event):
        # lone surrogates (from a _repr_html_, an exception's text) cannot be UTF-8: "?" instead
        line = (json.dumps(event, ensure_ascii=False) + "\n").encode("utf-8", "replace")
        with self.lock, signals.deferred():
            view = memoryview(line)
            while view:
                view = view[os.write(self.fd, view):]


class Signals:
    """SIGINT raises KeyboardInterrupt only while user code runs, and never in the middle of
    writing an event (it is raised when the write ends); while idle it is ignored."""

    def __init__(self):
        self.in_user_code = False
        self.critical = 0
        self.pending = False

    def install(self):
        signal.signal(signal.SIGINT, self.on_sigint)

    def on_sigint(self, _signum, _frame):
        if not self.in_user_code:
            return
        if self.critical:
            self.pending = True
            return
        raise KeyboardInterrupt

    def deferred(self):
        return _Deferred(self)


class _Deferred:
    # Python runs signal handlers in the main thread: only its own writes need deferring (the
    # output thread's must neither delay an interrupt nor receive it)
    def __init__(self, owner):
        self.owner = owner
        self.main = threading.current_thread() is threading.main_thread()

    def __enter__(self):
        if self.main:
            self.owner.critical += 1

    def __exit__(self, *exc):
        if not self.main:
            return False
        self.owner.critical -= 1
        if self.owner.critical == 0 and self.owner.pending:
            self.owner.pending = False
            if self.owner.in_user_code and exc[0] is None:
                raise KeyboardInterrupt
        return False


signals = Signals()


class OutputPump:
    """The thread that reads user code's stdout and stderr pipes and sends `stream` events.

    It reads the pipes only while a cell runs (between idle times, output waits in the pipe,
    so a background child writing to it blocks instead of using memory). The main thread asks
    it, over a control pipe, to start (`s`), to drain everything written so far and stay
    active (`f`, before a result, so output and results keep their order), or to drain and go
    idle (`d`, at a cell's end, so no output of a cell comes after its done); each drain is
    acknowledged by a counter."""

    def __init__(self, channel, fds):
        self.channel = channel
        self.streams = [(fd, name, codecs.getincrementaldecoder("utf-8")("replace"))
                        for fd, name in fds]
        for fd, _, _ in self.streams:
            os.set_blocking(fd, False)
        self.ctl_r, self.ctl_w = os.pipe()
        self.cell_id = None
        self.drained = 0
        self.requested = 0
        self.cond = threading.Condition()
        self.closed = set()
        thread = threading.Thread(target=self.run, name="airlock-output", daemon=True)
        # a small stack (it only polls, reads and sends): under gVisor, which commits a thread's
        # stack in large chunks, the default 8 MiB one costs an idle kernel ~0.6 MB more
        default = threading.stack_size(PUMP_STACK)
        try:
            thread.start()
        finally:
            threading.stack_size(default)  # user code's threads get the usual size

    def start(self, cell_id):
        self.cell_id = cell_id
        os.write(self.ctl_w, b"s")

    def drain(self, stay_active):
        """Sends every byte written to the pipes so far; returns when it is sent."""
        with signals.deferred():
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # user code replaced or closed it: nothing of ours to flush
                    pass
            self.requested += 1
            ticket = self.requested
            os.write(self.ctl_w, b"f" if stay_active else b"d")
        with self.cond:
            while self.drained < ticket:
                self.cond.wait()

    def run(self):
        active = False
        poller = select.poll()
        poller.register(self.ctl_r, select.POLLIN)
        while True:
            for fd, events in poller.poll():
                if fd == self.ctl_r:
                    for op in os.read(self.ctl_r, 64):
                        active = self.control(op, active, poller)
                elif active and fd not in self.closed:
                    self.read_once(fd)

    def control(self, op, active, poller):
        if op == ord("s"):
            if not active:
                for fd, _, _ in self.streams:
                    poller.register(fd, select.POLLIN)
            return True
        for fd, _, _ in self.streams:
            while fd not in self.closed and self.read_once(fd):
                pass
        for _, name, decoder in self.streams:
            self.send(name, decoder.decode(b"", final=True))
        if op == ord("d") and active:
            for fd, _, _ in self.streams:
                poller.unregister(fd)
            active = False
        with self.cond:
            self.drained += 1
            self.cond.notify_all()
        return active

    def read_once(self, fd):
        try:
            data = os.read(fd, STREAM_CHUNK)
        except BlockingIOError:
            return False
        if not data:  # user code closed its fd 1 or 2, and no child holds it: nothing more
            self.closed.add(fd)
            return False
        for sfd, name, decoder in self.streams:
            if sfd == fd:
                self.send(name, decoder.decode(data))
        return bool(data)

    def send(self, name, text):
        if text:
            self.channel.send({"type": "stream", "id": self.cell_id, "name": name, "text": text})


class Kernel:
    def __init__(self, channel, pump):
        self.channel = channel
        self.pump = pump
        self.execution_count = 0
        self.cell_id = None
        self.loop = None  # the asyncio loop of cells that `await` at top level
        self.main = types.ModuleType("__main__")
        self.main.__dict__["__builtins__"] = builtins
        # pickle and friends find user classes through sys.modules["__main__"]
        sys.modules["__main__"] = self.main
        builtins.display = self.display
        sys.meta_path.insert(0, PyplotHook(self))

    # -- results ---------------------------------------------------------------------------

    def display(self, *objs):
        """display(obj, ...): a result per object, as a notebook shows it."""
        for obj in objs:
            self.send_result(self.mime_bundle(obj))

    def send_result(self, data):
        self.pump.drain(stay_active=True)
        self.channel.send({"type": "result", "id": self.cell_id, "data": data})

    def mime_bundle(self, obj):
        data = {}
        bundle = self.call_repr(obj, "_repr_mimebundle_")
        if isinstance(bundle, tuple) and bundle:
            bundle = bundle[0]
        if isinstance(bundle, dict):
            for mime, value in bundle.items():
                self.put_mime(data, mime, value)
        for method, mime in MIME_METHODS:
            if mime not in data:
                self.put_mime(data, mime, self.call_repr(obj, method))
        figure = sys.modules.get("matplotlib.figure")
        if figure is not None and isinstance(obj, figure.Figure) and "image/png" not in data:
            data["image/png"] = figure_png(obj)
            pyplot = sys.modules.get("matplotlib.pyplot")
            if pyplot is not None:
                pyplot.close(obj)  # shown: not again at the cell's end
        data["text/plain"] = repr(obj)
        return data

    @staticmethod
    def call_repr(obj, method):
        try:
            fn = getattr(obj, method, None)
            if fn is None or isinstance(obj, type) or not callable(fn):
                return None
            return fn()
        except KeyboardInterrupt:
            raise
        except Exception as e:  # a broken _repr_ loses its form of the result, not the cell
            print("display: %s.%s failed: %s: %s" % (type(obj).__name__, method,
                                                     type(e).__name__, e), file=sys.stderr)
            return None

    @staticmethod
    def put_mime(data, mime, value):
        if value is None or not isinstance(mime, str):
            return
        if isinstance(value, tuple) and value:  # (data, metadata)
            value = value[0]
        if isinstance(value, (bytes, bytearray)):
            if mime in BINARY_MIMES:
                import base64
                value = base64.b64encode(value).decode("ascii")
            else:
                value = bytes(value).decode("utf-8", "replace")
        elif mime == "application/json" or not isinstance(value, str):
            try:
                value = json.dumps(value)
            except (TypeError, ValueError):
                value = str(value)
        data[mime] = value

    def show_figures(self, keep=None):
        """plt.show() and a cell's end: every open figure as image/png, then closed (but
        `keep`, the figure that is the cell's value: displayed as that)."""
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return
        for num in pyplot.get_fignums():
            fig = pyplot.figure(num)
            if fig is not keep:
                self.send_result({"image/png": figure_png(fig), "text/plain": repr(fig)})
                pyplot.close(fig)

    # -- cells -----------------------------------------------------------------------------

    def execute(self, cell_id, code):
        self.execution_count += 1
        self.cell_id = cell_id
        self.pump.start(cell_id)
        try:
            if not isinstance(code, str):
                raise TypeError("execute: code must be a string")
            self.run_cell(code)
        except BaseException as e:  # reported to the caller; the kernel goes on
            self.send_error(e)
        try:
            self.show_figures()
        except BaseException as e:
            self.send_error(e)
        self.pump.drain(stay_active=False)
        self.channel.send({"type": "done", "id": cell_id,
                           "execution_count": self.execution_count})

    def run_cell(self, code):
        filename = "<cell-%d>" % self.execution_count
        # tracebacks and inspect.getsource() show the cell's lines, as for a file
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        try:
            tree = compile(code, filename, "exec", _ast.PyCF_ONLY_AST | TOP_LEVEL_AWAIT)
            last = None
            if tree.body and isinstance(tree.body[-1], _ast.Expr):
                last = compile(_ast.Expression(tree.body.pop().value), filename, "eval", TOP_LEVEL_AWAIT)
            body = compile(tree, filename, "exec", TOP_LEVEL_AWAIT)
        except (SyntaxError, ValueError) as e:  # reported as Python reports a script's
            import traceback
            self.send_error(e, "".join(traceback.format_exception_only(type(e), e)))
            return
        ns = self.main.__dict__
        signals.pending = False
        signals.in_user_code = True
        try:
            self.run_code(body, ns)
            if last is not None:
                value = self.run_code(last, ns)
                if value is not None:
                    ns["_"] = value
                    # the figures drawn by the cell first: the value is the cell's last result
                    # (what the SDK's `text` is)
                    self.show_figures(keep=value)
                    self.display(value)
        finally:
            signals.in_user_code = False

    def run_code(self, code, ns):
        """eval() of a compiled cell part; one using top-level `await` runs on the kernel's
        event loop (asyncio imported only then), which lasts from cell to cell as a
        notebook's does."""
        value = eval(code, ns)
        if code.co_flags & CO_COROUTINE:
            if self.loop is None:
                import asyncio
                self.loop = asyncio.new_event_loop()
            task = self.loop.create_task(value)
            try:
                value = self.loop.run_until_complete(task)
            except BaseException as e:
                if not task.done():  # interrupted in the loop: say where the cell waits
                    tb = None
                    for frame in reversed(task.get_stack()):
                        tb = types.TracebackType(tb, frame, frame.f_lasti, frame.f_lineno)
                    if tb is not None:
                        e.with_traceback(tb)
                # An interrupted cell must not go on in a later cell's run of the loop: cancelled,
                # it only unwinds there. Not waited for here: a KeyboardInterrupt may have taken
                # the task's wake-up with it, and then it never ends (nor complains when freed).
                task.cancel()
                task._log_destroy_pending = False
                raise
        return value

    def send_error(self, e, text=None):
        self.pump.drain(stay_active=True)
        try:
            value = str(e)
        except Exception:  # an exception whose __str__ fails still gets reported
            value = "<exception str() failed>"
        try:
            text = text or format_traceback(e)
        except Exception:
            text = "%s: %s\n" % (type(e).__name__, value)
        self.channel.send({"type": "error", "id": self.cell_id, "name": type(e).__name__,
                           "value": value, "traceback": text})


def user_frames(stack):
    """A traceback's frames from the first of a cell on (what runs it, the kernel and asyncio's
    loop, is not the user's), without the kernel's own anywhere."""
    for i, f in enumerate(stack):
        if f.filename.startswith("<cell-"):
            stack = stack[i:]
            break
    return [f for f in stack if f.filename != KERNEL_FILE]


def format_traceback(e):
    """The traceback Python would print, without the kernel's own frames."""
    import traceback
    tbe = traceback.TracebackException(type(e), e, e.__traceback__)
    seen = set()
    todo = [tbe]
    while todo:  # the chain of causes and contexts, without recursion
        t = todo.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        t.stack = traceback.StackSummary.from_list(user_frames(t.stack))
        todo.extend(x for x in (t.__cause__, t.__context__) if x is not None)
    return "".join(tbe.format())


FONTS_CONF = ('<?xml version="1.0"?>\n<fontconfig><dir>/usr/share/fonts</dir>'
              '<cachedir prefix="xdg">fontconfig</cachedir></fontconfig>\n')


def give_fontconfig_a_configuration():
    """A sandbox's root may lack /etc/fonts: then matplotlib's first font scan (fc-list)
    prints "Fontconfig error: Cannot load default config file" into the user's cell. A
    minimal configuration listing the system's fonts avoids it."""
    if "FONTCONFIG_FILE" in os.environ or os.path.exists("/etc/fonts/fonts.conf") \
            or not os.path.isdir("/usr/share/fonts"):
        return
    import tempfile
    try:
        fd, path = tempfile.mkstemp(prefix="airlock-fonts-", suffix=".conf")
        with os.fdopen(fd, "w") as f:
            f.write(FONTS_CONF)
    except OSError:
        return
    os.environ["FONTCONFIG_FILE"] = path


def figure_png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    import base64
    return base64.b64encode(buf.getvalue()).decode("ascii")


class PyplotHook:
    """Makes plt.show() send the figures as results when user code imports matplotlib.pyplot
    (matplotlib itself is imported only then: start-up stays fast)."""

    def __init__(self, kernel):
        self.kernel = kernel

    def find_spec(self, fullname, path, target=None):
        if fullname == "matplotlib":
            give_fontconfig_a_configuration()
            return None  # the usual finders import it
        if fullname != "matplotlib.pyplot":
            return None
        import importlib.machinery
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _PatchingLoader(spec.loader, self.kernel)
        return spec


class _PatchingLoader:
    def __init__(self, loader, kernel):
        self.loader = loader
        self.kernel = kernel

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        kernel = self.kernel

        def show(*_args, **_kwargs):
            kernel.show_figures()

        show.__doc__ = module.show.__doc__
        module.show = show

    def __getattr__(self, name):
        return getattr(self.loader, name)


diag_fd = 2


def diag(message):
    try:
        os.write(diag_fd, message)
    except OSError:
        pass


def main():
    # matplotlib, when user code imports it, draws without a display (children inherit it too)
    os.environ["MPLBACKEND"] = "Agg"
    # Debian's matplotlib reads its settings only from /etc/matplotlibrc, which a sandbox's
    # root may lack: then the packaged copy (two stat calls; matplotlib is not imported here)
    if "MATPLOTLIBRC" not in os.environ and not os.path.exists("/etc/matplotlibrc") \
            and os.path.exists(DEBIAN_MATPLOTLIBRC):
        os.environ["MATPLOTLIBRC"] = DEBIAN_MATPLOTLIBRC
    global diag_fd
    diag_fd = os.dup(2)  # the kernel's own complaints go where its stderr went, not to a cell
    requests_fd = os.dup(0)  # dup()ed descriptors are close-on-exec: children never see them
    events_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # input() gets EOF
    os.close(devnull)
    pipes = []
    for fd, name in ((1, "stdout"), (2, "stderr")):
        r, w = os.pipe()
        os.dup2(w, fd)  # inheritable: os.system's and subprocess's children write here too
        os.close(w)
        pipes.append((r, name))
    # UTF-8 whatever the sandbox's locale, sent at each line's end (and at a cell's end)
    sys.stdout, sys.stderr = [open(fd, "w", buffering=1, encoding="utf-8",
                                   errors="backslashreplace", closefd=False) for fd in (1, 2)]
    channel = Channel(events_fd)
    pump = OutputPump(channel, pipes)
    kernel = Kernel(channel, pump)
    signals.install()
    v = sys.version_info
    channel.send({"type": "ready", "language": "python",
                  "version": "%d.%d.%d" % (v[0], v[1], v[2]), "pid": os.getpid()})
    with os.fdopen(requests_fd, "rb", buffering=0) as raw, io.BufferedReader(raw) as requests:
        for line in requests:
            try:
                req = json.loads(line)
            except ValueError:
                req = None
            if not isinstance(req, dict):
                diag(b"airlock kernel: ignored a request that is not a JSON object\n")
                continue
            op = req.get("op")
            if op == "execute":
                kernel.execute(req.get("id"), req.get("code"))
            elif op == "ping":  # airlockd's check after a restore: this process and its memory are back
                channel.send({"type": "pong", "id": req.get("id")})
            elif op == "shutdown":
                break
            else:
                diag(b"airlock kernel: ignored a request of unknown op\n")
    # user threads or atexit handlers must not keep a closed kernel alive
    os._exit(0)


if __name__ == "__main__":
    try:
        main()
    except BaseException:  # fd 2 is a pipe of ours by now: say why where airlockd can see it
        import traceback
        diag(traceback.format_exc().encode("utf-8", "replace"))
        os._exit(1)
