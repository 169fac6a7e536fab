#!/usr/bin/env python3
"""A scripted stand-in for the OpenAI Chat Completions and Anthropic Messages APIs, for the
agent example specs. It listens on 127.0.0.1 (port 0: the port is written to --port-file),
records every request it receives as one JSON line in --log, and answers in each provider's
wire format with a fixed script of tool calls chosen by how many assistant turns the
conversation already has:

  turn 0: run_command  python3 -m unittest -q           (see the failing test)
  turn 1: write_file   calc.py (the fix), then run_command on the tests, output to result.txt
  turn 2: read_file    result.txt, and read_file notes.txt (missing: an error text back)
  turn 3: a final text answer (finish_reason "stop" / stop_reason "end_turn")

--script csv plays a data analyst instead (examples/agent_kernel.lua): run_python loads
sales.csv into `rows` (turn 0), answers from `rows` without reading the file again (turn 1),
draws a chart with plt.show() (turn 2), then the final answer.

It checks what a real provider checks (the key header, the tool results answering the tool
calls it made, in order) and answers 400/401 with the provider's error shape otherwise.
--fail-first N answers the first N requests with 429 and `Retry-After: 0` (the client must
retry). Standard library only.
"""
import argparse
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FIXED_CALC = "def add(a, b):\n    return a + b\n"
TEST_COMMAND = "python3 -m unittest -q test_calc > result.txt 2>&1; echo exit=$?"
FINAL_TEXT = "Fixed calc.add: it subtracted instead of adding. The test passes now."


CSV_LOAD = ("import csv\nwith open('sales.csv') as f:\n    rows = list(csv.DictReader(f))\n"
            "len(rows), round(sum(float(r['revenue']) for r in rows), 2)")
CSV_TOP_REGION = ("from collections import defaultdict\nby_region = defaultdict(float)\n"
                  "for r in rows:\n    by_region[r['region']] += float(r['revenue'])\n"
                  "max(by_region.items(), key=lambda kv: kv[1])")
CSV_CHART = ("import matplotlib.pyplot as plt\nby_month = defaultdict(float)\n"
             "for r in rows:\n    by_month[r['month']] += float(r['revenue'])\n"
             "months = sorted(by_month)\nplt.bar(months, [by_month[m] for m in months])\n"
             "plt.title('Revenue by month'); plt.xticks(rotation=45)\nplt.show()\n"
             "months[0], months[-1], round(by_month[months[-1]] - by_month[months[0]], 2)")
CSV_FINAL = ("From the data loaded once: the sales count and total, the top region, and the "
             "monthly revenue in the chart.")


def csv_script(turn):
    code = {0: CSV_LOAD, 1: CSV_TOP_REGION, 2: CSV_CHART}.get(turn)
    return None if code is None else [("run_python", {"code": code, "timeout_seconds": 60})]


def script(turn):
    """The tool calls (name, arguments) of a turn, or None for the final answer."""
    if State.script == "csv":
        return csv_script(turn)
    if turn == 0:
        return [("run_command", {"command": "python3 -m unittest -q", "timeout_seconds": 30})]
    if turn == 1:
        return [("write_file", {"path": "calc.py", "content": FIXED_CALC}),
                ("run_command", {"command": TEST_COMMAND})]
    if turn == 2:
        return [("read_file", {"path": "result.txt"}), ("read_file", {"path": "notes.txt"})]
    return None


class State:
    script = "fix"
    requests = 0
    fail_first = 0
    openai_key = ""
    anthropic_key = ""
    log_path = ""


def final_text():
    return CSV_FINAL if State.script == "csv" else FINAL_TEXT


def openai_ids(turn, n):
    return ["call_%d_%d" % (turn, i) for i in range(n)]


def anthropic_ids(turn, n):
    return ["toolu_%d_%d" % (turn, i) for i in range(n)]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def send_json(self, status, obj, extra=None):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        State.requests += 1
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        record = {
            "n": State.requests,
            "method": "POST",
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body,
            "raw": raw.decode("utf-8", "replace"),
        }
        with open(State.log_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if State.requests <= State.fail_first:
            return self.send_json(429, {"error": {"type": "rate_limit_error",
                                                  "message": "Slow down (scripted)."}},
                                  {"Retry-After": "0"})
        if body is None:
            return self.send_json(400, {"error": {"message": "body is not JSON"}})
        if self.path == "/v1/chat/completions":
            return self.openai(body)
        if self.path == "/v1/messages":
            return self.anthropic(body)
        return self.send_json(404, {"error": {"message": "no route " + self.path}})

    # ----------------------------------------------------------------- OpenAI
    def openai(self, body):
        if self.headers.get("Authorization") != "Bearer " + State.openai_key:
            return self.send_json(401, {"error": {"message": "Incorrect API key provided.",
                                                  "type": "invalid_request_error"}})
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not isinstance(body.get("tools"), list):
            return self.send_json(400, {"error": {"message": "messages and tools are required"}})
        turn = 0
        pending = []
        for m in msgs:
            if m.get("role") == "assistant":
                if pending:
                    return self.send_json(400, {"error": {"message": "tool calls not answered: %s" % pending}})
                turn += 1
                pending = [c["id"] for c in m.get("tool_calls") or []]
            elif m.get("role") == "tool":
                if not pending or m.get("tool_call_id") != pending[0]:
                    return self.send_json(400, {"error": {"message": "unexpected tool message %r" % m.get("tool_call_id")}})
                pending.pop(0)
        if pending:
            return self.send_json(400, {"error": {"message": "tool calls not answered: %s" % pending}})
        calls = script(turn)
        if calls is None:
            message = {"role": "assistant", "content": final_text(), "refusal": None, "annotations": []}
            finish = "stop"
        else:
            ids = openai_ids(turn, len(calls))
            message = {
                "role": "assistant", "content": None, "refusal": None, "annotations": [],
                "tool_calls": [{"id": i, "type": "function",
                                "function": {"name": name, "arguments": json.dumps(args)}}
                               for i, (name, args) in zip(ids, calls)],
            }
            finish = "tool_calls"
        self.send_json(200, {
            "id": "chatcmpl-%d" % State.requests, "object": "chat.completion", "created": 0,
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        })

    # ----------------------------------------------------------------- Anthropic
    def anthropic(self, body):
        if self.headers.get("x-api-key") != State.anthropic_key:
            return self.send_json(401, {"type": "error", "error": {"type": "authentication_error",
                                                                   "message": "invalid x-api-key"}})
        if self.headers.get("anthropic-version") != "2023-06-01":
            return self.send_json(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                                   "message": "anthropic-version missing"}})
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not isinstance(body.get("tools"), list) or not body.get("max_tokens"):
            return self.send_json(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                                   "message": "messages, tools, max_tokens required"}})
        turn = 0
        pending = []
        for m in msgs:
            content = m.get("content")
            if m.get("role") == "assistant":
                if pending:
                    return self.bad("tool_use ids without tool_result blocks: %s" % pending)
                turn += 1
                pending = [b["id"] for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
            elif m.get("role") == "user" and pending:
                results = [b.get("tool_use_id") for b in content
                           if isinstance(b, dict) and b.get("type") == "tool_result"] if isinstance(content, list) else []
                if results != pending:
                    return self.bad("tool_result blocks %s do not answer %s" % (results, pending))
                pending = []
        if pending:
            return self.bad("tool_use ids without tool_result blocks: %s" % pending)
        calls = script(turn)
        if calls is None:
            content = [{"type": "text", "text": final_text()}]
            stop = "end_turn"
        else:
            ids = anthropic_ids(turn, len(calls))
            content = [{"type": "text", "text": "Step %d." % (turn + 1)}]
            content += [{"type": "tool_use", "id": i, "name": name, "input": args}
                        for i, (name, args) in zip(ids, calls)]
            stop = "tool_use"
        self.send_json(200, {
            "id": "msg_%d" % State.requests, "type": "message", "role": "assistant",
            "model": body.get("model"), "content": content, "stop_reason": stop,
            "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5},
        })

    def bad(self, message):
        return self.send_json(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                               "message": message}})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port-file", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--openai-key", default="sk-test-openai")
    p.add_argument("--anthropic-key", default="sk-ant-test")
    p.add_argument("--fail-first", type=int, default=0)
    p.add_argument("--script", choices=("fix", "csv"), default="fix")
    a = p.parse_args()
    State.script = a.script
    State.log_path = a.log
    State.fail_first = a.fail_first
    State.openai_key = a.openai_key
    State.anthropic_key = a.anthropic_key
    open(a.log, "w").close()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(tmp, a.port_file)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
