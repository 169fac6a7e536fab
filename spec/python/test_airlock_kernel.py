"""The Python kernel (src/kernel/python/airlock_kernel.py), driven as airlockd's agent drives
it: a child process, requests on its stdin, events read from its stdout.

    /usr/bin/python3 -m unittest spec/python/test_airlock_kernel.py

(spec/python/kernel_program_spec.lua runs this from the suite.) Needs only the standard
library; the matplotlib tests are skipped when the interpreter has no matplotlib.
"""

import base64
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
KERNEL = os.path.join(HERE, "..", "..", "src", "kernel", "python", "airlock_kernel.py")
KERNEL = os.path.normpath(KERNEL)
START = os.path.join(os.path.dirname(KERNEL), "kernel_start.py")
WAIT = 30  # seconds: a broken kernel fails a test instead of hanging the suite


def has_matplotlib():
    probe = subprocess.run([sys.executable, "-c", "import matplotlib"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return probe.returncode == 0


class KernelProcess:
    """A kernel child (the program, or another file that starts it); its events arrive on a
    queue filled by a thread."""

    def __init__(self, program=KERNEL):
        self.proc = subprocess.Popen([sys.executable, "-u", program], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     cwd="/tmp")
        self.events = queue.Queue()
        self.raw_lines = []
        threading.Thread(target=self._read, daemon=True).start()
        self.next_id = 0
        self.ready = self.next_event()

    def _read(self):
        for line in self.proc.stdout:
            self.raw_lines.append(line)
            self.events.put(json.loads(line))  # a line that is not JSON fails the reader
        self.events.put(None)

    def next_event(self):
        try:
            event = self.events.get(timeout=WAIT)
        except queue.Empty:
            raise AssertionError("no event from the kernel within %d s" % WAIT)
        if event is None:
            raise AssertionError("the kernel closed its event channel")
        return event

    def send(self, request):
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()

    def submit(self, code):
        self.next_id += 1
        self.send({"op": "execute", "id": self.next_id, "code": code})
        return self.next_id

    def collect(self, cell_id):
        """The events of cell `cell_id` up to its done (which is the last)."""
        events = []
        while True:
            event = self.next_event()
            assert event.get("id") == cell_id, "an event of another cell: %r" % (event,)
            events.append(event)
            if event["type"] == "done":
                return Cell(events)

    def execute(self, code):
        return self.collect(self.submit(code))

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            f.close()


class Cell:
    def __init__(self, events):
        self.events = events
        self.done = events[-1]
        self.results = [e["data"] for e in events if e["type"] == "result"]
        errors = [e for e in events if e["type"] == "error"]
        self.error = errors[0] if errors else None
        self.stdout = "".join(e["text"] for e in events
                              if e["type"] == "stream" and e["name"] == "stdout")
        self.stderr = "".join(e["text"] for e in events
                              if e["type"] == "stream" and e["name"] == "stderr")

    @property
    def text(self):
        return self.results[-1]["text/plain"] if self.results else None


class KernelTest(unittest.TestCase):
    def setUp(self):
        self.k = KernelProcess()
        self.addCleanup(self.k.close)

    def assertNoKernelFrames(self, traceback_text):
        self.assertNotIn(KERNEL, traceback_text)
        self.assertNotIn("airlock_kernel", traceback_text)


class StartAndStop(KernelTest):
    def test_ready_names_the_language_version_and_pid(self):
        ready = self.k.ready
        self.assertEqual(ready["type"], "ready")
        self.assertEqual(ready["language"], "python")
        self.assertEqual(ready["version"], "%d.%d.%d" % sys.version_info[:3])
        self.assertEqual(ready["pid"], self.k.proc.pid)

    def test_start_imports_nothing_heavy(self):
        cell = self.k.execute("import sys\n"
                              "sorted(m for m in ('matplotlib', 'numpy', 'pandas', 'asyncio',"
                              " 'email', 'http', 'platform', 'subprocess', 'traceback', 'base64')"
                              " if m in sys.modules)")
        self.assertEqual(cell.text, "[]")

    def test_eof_exits_0(self):
        self.k.execute("import threading, time\n"
                       "threading.Thread(target=time.sleep, args=(600,)).start()")
        self.k.proc.stdin.close()
        self.assertEqual(self.k.proc.wait(timeout=WAIT), 0)

    def test_shutdown_exits_0(self):
        self.k.send({"op": "shutdown"})
        self.assertEqual(self.k.proc.wait(timeout=WAIT), 0)

    def test_a_request_that_is_not_json_is_skipped(self):
        self.k.proc.stdin.write(b"not json\n[1]\n")
        self.k.send({"op": "nonsense", "id": 99})
        self.assertEqual(self.k.execute("6 * 7").text, "42")

    def test_code_that_is_not_a_string_is_an_error_of_its_cell(self):
        self.k.send({"op": "execute", "id": 5, "code": 12})
        cell = self.k.collect(5)
        self.assertEqual(cell.error["name"], "TypeError")
        self.assertEqual(cell.done["execution_count"], 1)


class Cells(KernelTest):
    def test_state_last_expression_underscore_and_count(self):
        first = self.k.execute("x = 41")
        self.assertEqual(first.results, [])
        self.assertEqual(first.done, {"type": "done", "id": 1, "execution_count": 1})
        second = self.k.execute("x + 1")
        self.assertEqual(second.results, [{"text/plain": "42"}])
        self.assertEqual(second.done["execution_count"], 2)
        third = self.k.execute("_ + 1")
        self.assertEqual(third.text, "43")
        self.assertEqual(third.done["execution_count"], 3)

    def test_a_none_value_or_a_statement_displays_nothing(self):
        self.assertEqual(self.k.execute("None").results, [])
        self.assertEqual(self.k.execute("print('p')").results, [])
        self.assertEqual(self.k.execute("for i in range(3): i").results, [])
        self.assertEqual(self.k.execute("'s'").text, "'s'")

    def test_functions_and_classes_live_in_main(self):
        cell = self.k.execute("import pickle, inspect\n"
                              "class Point:\n"
                              "    def __init__(self, x): self.x = x\n"
                              "p = pickle.loads(pickle.dumps(Point(3)))\n"
                              "def area(r):\n"
                              "    return 3 * r * r\n"
                              "(__name__, p.x, inspect.getsource(area).splitlines()[0])")
        self.assertIsNone(cell.error)
        self.assertEqual(cell.text, "('__main__', 3, 'def area(r):')")

    def test_top_level_await_runs_on_one_loop_for_all_cells(self):
        first = self.k.execute("import asyncio\nloop = asyncio.get_running_loop()\n"
                               "await asyncio.sleep(0.01)\nawait asyncio.sleep(0, result=5)")
        self.assertIsNone(first.error)
        self.assertEqual(first.text, "5")
        second = self.k.execute("async def current():\n    return asyncio.get_running_loop()\n"
                                "(await current()) is loop")
        self.assertEqual(second.text, "True")
        self.assertEqual(self.k.execute("'asyncio' in __import__('sys').modules").text, "True")

    def test_input_gets_eof(self):
        cell = self.k.execute("input()")
        self.assertEqual(cell.error["name"], "EOFError")


class Streams(KernelTest):
    def test_print_and_child_processes_stream_before_done(self):
        cell = self.k.execute("import os, subprocess, sys\n"
                              "print('from print')\n"
                              "print('to stderr', file=sys.stderr)\n"
                              "os.system('echo from os.system; echo err-child >&2')\n"
                              "subprocess.run(['sh', '-c', 'echo from subprocess'])\n"
                              "print('tail', end='')")
        self.assertEqual(cell.stdout, "from print\nfrom os.system\nfrom subprocess\ntail")
        self.assertEqual(cell.stderr, "to stderr\nerr-child\n")
        self.assertEqual([e["type"] for e in cell.events][-1], "done")

    def test_output_and_results_keep_their_order(self):
        cell = self.k.execute("print('a')\ndisplay(1)\nprint('b')\n2")
        kinds = [(e["type"], e.get("text") or e.get("data", {}).get("text/plain"))
                 for e in cell.events]
        self.assertEqual(kinds, [("stream", "a\n"), ("result", "1"), ("stream", "b\n"),
                                 ("result", "2"), ("done", None)])

    def test_a_child_output_burst_all_comes_before_done(self):
        for _ in range(5):
            cell = self.k.execute("import os\nos.system('seq 1 20000')")
            self.assertEqual(cell.stdout, "".join("%d\n" % i for i in range(1, 20001)))

    def test_non_utf8_output_is_replaced_and_split_characters_are_kept(self):
        cell = self.k.execute("import os, sys\n"
                              "os.write(1, b'ok \\xff\\xfe end\\n')\n"
                              "sys.stdout.buffer.write(b'\\xc3'); sys.stdout.flush()\n"
                              "sys.stdout.buffer.write(b'\\xa9\\n')\n"
                              "print('\\udc80 lone')")
        self.assertEqual(cell.stdout, "ok \ufffd\ufffd end\n\u00e9\n\\udc80 lone\n")

    def test_a_huge_print_arrives_whole_in_bounded_events(self):
        cell = self.k.execute("print('x' * 5_000_000)")
        self.assertEqual(cell.stdout, "x" * 5_000_000 + "\n")
        streams = [e for e in cell.events if e["type"] == "stream"]
        self.assertGreater(len(streams), 1)
        self.assertTrue(all(len(e["text"]) <= 64 * 1024 for e in streams))

    def test_user_code_cannot_write_on_the_event_channel(self):
        cell = self.k.execute("import os\n"
                              "os.write(1, b'{\"type\": \"done\", \"id\": 1}\\n')\n"
                              "os.write(2, b'not an event\\n')")
        self.assertEqual(cell.stdout, '{"type": "done", "id": 1}\n')
        self.assertEqual(cell.stderr, "not an event\n")
        self.assertEqual(len([e for e in cell.events if e["type"] == "done"]), 1)


class Errors(KernelTest):
    def test_an_exception_has_its_traceback_without_kernel_frames(self):
        cell = self.k.execute("def f():\n    return 1 / 0\nf()")
        err = cell.error
        self.assertEqual((err["name"], err["value"]), ("ZeroDivisionError", "division by zero"))
        tb = err["traceback"]
        self.assertTrue(tb.startswith("Traceback (most recent call last):\n"), tb)
        self.assertIn('File "<cell-1>", line 3, in <module>\n    f()\n', tb)
        self.assertIn('File "<cell-1>", line 2, in f\n    return 1 / 0\n', tb)
        self.assertTrue(tb.endswith("ZeroDivisionError: division by zero\n"), tb)
        self.assertNoKernelFrames(tb)
        self.assertEqual(cell.done["execution_count"], 1)
        self.assertEqual(self.k.execute("1").text, "1")

    def test_chained_exceptions_keep_both_without_kernel_frames(self):
        cell = self.k.execute("try:\n    {}['k']\nexcept KeyError as e:\n"
                              "    raise ValueError('bad') from e")
        tb = cell.error["traceback"]
        self.assertIn("KeyError: 'k'", tb)
        self.assertIn("direct cause", tb)
        self.assertTrue(tb.endswith("ValueError: bad\n"))
        self.assertNoKernelFrames(tb)

    def test_a_syntax_error_reads_as_python_reports_it(self):
        cell = self.k.execute("x = 1\ny = (\n")
        err = cell.error
        self.assertEqual(err["name"], "SyntaxError")
        self.assertTrue(err["traceback"].startswith('  File "<cell-1>", line 2\n'),
                        err["traceback"])
        self.assertIn("SyntaxError: '(' was never closed", err["traceback"])
        self.assertNoKernelFrames(err["traceback"])
        # nothing of the cell ran
        self.assertEqual(self.k.execute("'x' in globals()").text, "False")

    def test_system_exit_is_an_error_and_the_kernel_goes_on(self):
        cell = self.k.execute("import sys\nkept = 5\nsys.exit(3)")
        self.assertEqual((cell.error["name"], cell.error["value"]), ("SystemExit", "3"))
        self.assertNoKernelFrames(cell.error["traceback"])
        self.assertEqual(self.k.execute("kept").text, "5")
        self.assertIsNone(self.k.proc.poll())

    def test_an_exception_whose_str_fails_and_a_deep_recursion_are_reported(self):
        cell = self.k.execute("class Odd(Exception):\n    def __str__(self): raise ValueError('no str')\n"
                              "raise Odd()")
        self.assertEqual((cell.error["name"], cell.error["value"]), ("Odd", "<exception str() failed>"))
        deep = self.k.execute("def f(n): return f(n + 1)\nf(0)")
        self.assertEqual(deep.error["name"], "RecursionError")
        self.assertIn("more times]", deep.error["traceback"])  # repeated frames folded, as Python does
        self.assertNoKernelFrames(deep.error["traceback"])
        self.assertEqual(self.k.execute("2 + 2").text, "4")

    def test_a_broken_repr_is_the_cells_error(self):
        cell = self.k.execute("class B:\n    def __repr__(self): raise RuntimeError('no')\nB()")
        self.assertEqual(cell.error["name"], "RuntimeError")
        self.assertNoKernelFrames(cell.error["traceback"])

    def test_a_broken_html_repr_loses_only_its_html(self):
        cell = self.k.execute("class H:\n    def _repr_html_(self): raise RuntimeError('x')\n"
                              "    def __repr__(self): return 'H!'\nH()")
        self.assertIsNone(cell.error)
        self.assertEqual(cell.results, [{"text/plain": "H!"}])
        self.assertIn("_repr_html_ failed: RuntimeError: x", cell.stderr)


class Interrupts(KernelTest):
    def test_sigint_interrupts_the_cell_and_keeps_state(self):
        self.k.execute("x = 41")
        cell_id = self.k.submit("import time\nprint('sleeping')\ntime.sleep(600)")
        first = self.k.next_event()
        self.assertEqual((first["type"], first.get("text")), ("stream", "sleeping\n"))
        self.k.proc.send_signal(signal.SIGINT)
        cell = self.k.collect(cell_id)
        self.assertEqual(cell.error["name"], "KeyboardInterrupt")
        self.assertIn('File "<cell-2>", line', cell.error["traceback"])
        self.assertNoKernelFrames(cell.error["traceback"])
        self.assertEqual(self.k.execute("x + 1").text, "42")

    def test_sigint_amid_results_and_output_keeps_the_channel_whole(self):
        cell_id = self.k.submit("i = 0\nwhile True:\n    i += 1\n    display(i)\n"
                                "    print('x' * 1000)")
        for _ in range(50):
            self.k.next_event()
        self.k.proc.send_signal(signal.SIGINT)
        cell = self.k.collect(cell_id)  # every line was JSON (the reader parses each)
        self.assertEqual(cell.error["name"], "KeyboardInterrupt")
        self.assertNoKernelFrames(cell.error["traceback"])
        self.assertEqual(self.k.execute("i > 0").text, "True")

    def test_sigint_stops_an_awaiting_cell_says_where_it_waited_and_for_good(self):
        # "waiting" is printed by the loop once the cell's task waits in its sleep
        cell_id = self.k.submit("import asyncio\n"
                                "asyncio.get_running_loop().call_later(0.1, print, 'waiting')\n"
                                "await asyncio.sleep(1.5)\nprint('the rest of the cell ran')")
        self.assertEqual(self.k.next_event().get("text"), "waiting\n")
        self.k.proc.send_signal(signal.SIGINT)
        cell = self.k.collect(cell_id)
        self.assertEqual(cell.error["name"], "KeyboardInterrupt")
        # where the cell waited, not the loop's frames
        self.assertIn('File "<cell-1>", line 3, in <module>\n    await asyncio.sleep(1.5)\n',
                      cell.error["traceback"])
        self.assertNotIn("base_events.py", cell.error["traceback"])
        self.assertEqual(cell.stdout, "")  # after "waiting", nothing more of it ran
        # a later cell running the loop past the old sleep's end: the interrupted one stays dead
        later = self.k.execute("await asyncio.sleep(2)\n'after'")
        self.assertEqual(later.stdout, "")
        self.assertEqual(later.text, "'after'")

    def test_sigint_while_idle_is_ignored(self):
        self.k.execute("x = 1")
        for _ in range(3):
            self.k.proc.send_signal(signal.SIGINT)
        cell = self.k.execute("x")
        self.assertIsNone(cell.error)
        self.assertEqual(cell.text, "1")
        self.assertIsNone(self.k.proc.poll())


class Display(KernelTest):
    def test_display_uses_the_repr_methods(self):
        cell = self.k.execute(
            "class Table:\n"
            "    def _repr_html_(self): return '<table><tr><td>1</td></tr></table>'\n"
            "    def _repr_markdown_(self): return '| 1 |'\n"
            "    def _repr_png_(self): return b'\\x89PNG fake'\n"
            "    def _repr_json_(self): return {'a': [1, 2]}\n"
            "    def __repr__(self): return 'Table(1)'\n"
            "display(Table(), 'two')")
        self.assertIsNone(cell.error)
        self.assertEqual(cell.results, [
            {"text/plain": "Table(1)", "text/html": "<table><tr><td>1</td></tr></table>",
             "text/markdown": "| 1 |", "image/png": base64.b64encode(b"\x89PNG fake").decode(),
             "application/json": '{"a": [1, 2]}'},
            {"text/plain": "'two'"}])

    def test_the_last_expression_gets_rich_forms_too(self):
        cell = self.k.execute("class T:\n    def _repr_html_(self): return '<b>t</b>'\nT()")
        self.assertEqual(cell.results[0]["text/html"], "<b>t</b>")
        self.assertTrue(cell.results[0]["text/plain"].startswith("<__main__.T object"))


@unittest.skipUnless(has_matplotlib(), "this python3 has no matplotlib (python3-matplotlib)")
class Matplotlib(KernelTest):
    def assertPng(self, data):
        self.assertTrue(base64.b64decode(data["image/png"]).startswith(b"\x89PNG\r\n\x1a\n"))

    def test_plt_show_and_an_open_figure_at_the_end_are_images(self):
        cell = self.k.execute("import matplotlib.pyplot as plt\n"
                              "plt.plot([1, 2, 3]); plt.show()\n"
                              "print('between')\n"
                              "plt.figure(); plt.bar(['a', 'b'], [3, 1])\n"
                              "None")
        self.assertIsNone(cell.error)
        kinds = [e["type"] for e in cell.events]
        self.assertEqual(kinds, ["result", "stream", "result", "done"])
        self.assertPng(cell.results[0])
        self.assertPng(cell.results[1])
        self.assertEqual(cell.stdout, "between\n")
        self.assertEqual(cell.stderr, "")  # no "non-GUI backend" warning
        after = self.k.execute("import matplotlib\n(plt.get_fignums(), matplotlib.get_backend())")
        self.assertEqual(after.text, "([], 'agg')")

    def test_the_last_expression_comes_after_the_figures_of_its_cell(self):
        cell = self.k.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2])\n6 * 7")
        self.assertEqual(len(cell.results), 2)
        self.assertPng(cell.results[0])
        self.assertEqual(cell.results[1], {"text/plain": "42"})

    def test_a_figure_as_the_last_expression_is_shown_once(self):
        cell = self.k.execute("import matplotlib.pyplot as plt\n"
                              "fig, ax = plt.subplots(); ax.plot([1, 0])\nfig")
        self.assertEqual(len(cell.results), 1)
        self.assertPng(cell.results[0])
        self.assertTrue(cell.results[0]["text/plain"].startswith("<Figure"))

    def test_matplotlib_is_imported_only_by_user_code(self):
        self.assertEqual(self.k.execute("import sys\n'matplotlib' in sys.modules").text, "False")


class Launcher(unittest.TestCase):
    """kernel_start.py, laid out as in a sandbox's /airlock: kernel.py (the launcher),
    kernel-program.py and its bytecode kernel-program.pyc (compiled as the Makefile does)."""

    def start(self, pyc):
        import py_compile
        import shutil
        import tempfile
        d = tempfile.mkdtemp(prefix="airlock-launcher-")
        self.addCleanup(shutil.rmtree, d)
        shutil.copy(START, os.path.join(d, "kernel.py"))
        shutil.copy(KERNEL, os.path.join(d, "kernel-program.py"))
        if pyc == "compiled":
            py_compile.compile(KERNEL, cfile=os.path.join(d, "kernel-program.pyc"),
                               dfile="/airlock/kernel-program.py", doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        elif pyc == "another python's":
            with open(os.path.join(d, "kernel-program.pyc"), "wb") as f:
                f.write(b"\x00\x00\r\n" + bytes(12) + b"not this python's bytecode")
        k = KernelProcess(os.path.join(d, "kernel.py"))
        self.addCleanup(k.close)
        return k, d

    def check(self, k, d):
        self.assertEqual(k.ready["type"], "ready")
        self.assertEqual(k.execute("x = 41").error, None)
        self.assertEqual(k.execute("x + 1").text, "42")
        # nothing of the launcher's in the user's namespace, nor the ast module
        self.assertEqual(k.execute("import sys\nsorted(n for n in ('program_code', 'marshal', 'code', 'base')"
                                   " if n in globals()), 'ast' in sys.modules").text, "([], False)")
        err = k.execute("def f():\n    return 1 / 0\nf()").error
        self.assertIn('File "<cell-4>", line 2, in f\n', err["traceback"])
        self.assertNotIn(d, err["traceback"])  # neither the launcher's nor the program's frames

    def test_runs_the_program_from_its_bytecode(self):
        k, d = self.start("compiled")
        self.check(k, d)
        # the frame that runs a cell is the bytecode's (named as the Makefile names it), not the
        # source's, compiled here
        self.assertEqual(k.execute("import sys\nsys._getframe(1).f_code.co_filename").text,
                         repr("/airlock/kernel-program.py"))
        self.assertNotIn("/airlock/", k.execute("1 / 0").error["traceback"])

    def test_compiles_the_source_without_bytecode_or_with_another_pythons(self):
        for pyc in ("none", "another python's"):
            with self.subTest(pyc=pyc):
                k, d = self.start(pyc)
                self.check(k, d)
                self.assertEqual(k.execute("import sys\nsys._getframe(1).f_code.co_filename").text,
                                 repr(os.path.join(d, "kernel-program.py")))


if __name__ == "__main__":
    unittest.main()
