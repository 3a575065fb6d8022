"""A scripted model server on 127.0.0.1 for driving the real Claude Code and Codex CLIs offline.

It speaks just enough of two streaming APIs for the harnesses to run their real tools and hooks:
- Anthropic Messages: `POST /v1/messages` (SSE: message_start, content_block_start/delta/stop,
  message_delta with stop_reason, message_stop);
- OpenAI Responses: `POST /v1/responses` (SSE: response.created, response.output_item.added/done,
  response.completed);
- Gemini API: `POST /v1beta/models/<model>:streamGenerateContent?alt=sse` (SSE `data:` chunks of
  GenerateContentResponse) and `:generateContent` (one JSON reply), which Gemini CLI sends to
  GOOGLE_GEMINI_BASE_URL (see the gemini_* functions);
- Augment's API (Auggie, which takes the server from its session's tenantURL): `POST get-models`
  (one model, `enable_hooks` on: Auggie 0.36.0 loads hooks only with that server flag),
  `agents/list-remote-tools` (none) and `chat-stream` (newline-delimited JSON: a text node, a
  tool_use node per call with its arguments as `input_json`, then stop_reason 3 for tool use or
  1 for the end of a turn); a `silent` chat-stream (its session title) is a side request;
- OpenAI Chat Completions: `POST /v1/chat/completions` (any path ending in `/chat/completions`),
  streaming (SSE `chat.completion.chunk`s with `tool_calls` deltas, then `data: [DONE]`) or not
  (one `chat.completion`). Any scripted call becomes a function tool call there: its
  `arguments` (or `input`) are the JSON arguments, so `tool(name, **args)` works for any harness
  that speaks Chat Completions.

A scenario is a list of turns consumed in order, one per model request. A turn is a `Turn`
(text and/or tool calls) or a function `f(request) -> Turn`, so a turn can react to what the
harness sent. When the script runs out, the server answers with a short final text and records
the overrun in `errors`. Subagents run their own conversations, possibly concurrently with the
parent: `lanes={marker: [turns]}` sends every request whose first user message contains
`marker` in its user text (e.g. a word in the subagent's task prompt) to that lane's own list of turns.

Invariants:
- every request is recorded (`requests`), model requests in the order they were answered;
- nothing leaves the machine: the harnesses' HTTP(S)_PROXY points here, and every CONNECT or
  absolute-URL request to a non-loopback host is refused with 403 and recorded in `refused`;
- side requests (count_tokens, model lists, anything else) get a harmless reply and are recorded.
"""

import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
AUGMENT_MODEL = "e2e-model"
AUGMENT_SIDE = {  # Auggie's requests besides chat-stream that need more than an empty object
    "/get-models": {"default_model": AUGMENT_MODEL, "languages": [], "feature_flags": {"enable_hooks": True},
                    "models": [{"name": AUGMENT_MODEL, "suggested_prefix_char_count": 0,
                                "suggested_suffix_char_count": 0}]},
    "/agents/list-remote-tools": {"tools": []},
    "/find-missing": {"unknown_memory_names": [], "nonindexed_blob_names": []},
    "/settings/get-mcp-user-configs": {}, "/settings/get-mcp-tenant-configs": {},
    "/indexed-commits/get-latest-blobset": {}, "/report-error": {},
}


class Turn(object):
    """One scripted model reply: optional text, then zero or more tool calls."""

    def __init__(self, text=None, calls=()):
        self.text = text
        self.calls = list(calls)

    def __repr__(self):
        return "Turn(text=%r, calls=%r)" % (self.text, self.calls)


def say(text):
    """A final reply: text only (Claude stop_reason end_turn; Codex an assistant message)."""
    return Turn(text=text)


def tool(name, **tool_input):
    """A Claude tool call, e.g. tool("Write", file_path=..., content=...)."""
    return Turn(calls=[{"kind": "claude", "name": name, "input": tool_input}])


def apply_patch(patch):
    """A Codex apply_patch call; `patch` is the whole `*** Begin Patch ... *** End Patch` text."""
    if not patch.endswith("\n"):
        patch += "\n"
    return Turn(calls=[{"kind": "custom", "name": "apply_patch", "input": patch}])


def shell(cmd, **extra):
    """A Codex shell call (function `exec_command`)."""
    args = {"cmd": cmd}
    args.update(extra)
    return Turn(calls=[{"kind": "function", "name": "exec_command", "arguments": args}])


def gemini_tool(name, **args):
    """A Gemini CLI tool call (a functionCall part), e.g. gemini_tool("write_file", file_path=..., content=...)."""
    return Turn(calls=[{"kind": "gemini", "name": name, "args": args}])


def function_call(name, arguments, namespace=None):
    """Any other Codex function call (e.g. a multi-agent tool)."""
    call = {"kind": "function", "name": name, "arguments": arguments}
    if namespace:
        call["namespace"] = namespace
    return Turn(calls=[call])


class Request(object):
    """One recorded HTTP request."""

    def __init__(self, method, path, headers, body, raw):
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.raw = raw
        self.time = time.time()
        self.turn = None  # index of the scripted turn that answered it, if any
        self.lane = None  # the lane marker that answered it (None: the main script)

    @property
    def api(self):
        p = urlsplit(self.path).path
        if p == "/v1/messages":
            return "anthropic"
        if p == "/v1/responses":
            return "openai"
        if gemini_path(p):
            return "gemini"
        if p.endswith("/chat/completions"):
            return "chat"
        if p == "/chat-stream":
            return "augment"
        return None

    def text(self):
        """The whole body as JSON text, for substring checks."""
        return json.dumps(self.body, ensure_ascii=False)

    def items(self):
        """The conversation items: Claude `messages`, Codex `input`, Auggie's request nodes."""
        if not isinstance(self.body, dict):
            return []
        if self.api == "augment":
            return augment_items(self.body)
        if self.api in ("anthropic", "chat"):
            return list(self.body.get("messages") or [])
        if self.api == "gemini":
            return list(self.body.get("contents") or [])
        return list(self.body.get("input") or [])

    def tail(self):
        """Items the harness added after the model's last output: tool results, context, ...

        Claude: every message after the last assistant message. Codex: every input item after
        the last item the model produced (a call, reasoning, or an assistant message).
        """
        items = self.items()
        last = -1
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                continue
            if self.api == "gemini":
                if item.get("role") == "model":
                    last = i
            elif self.api in ("anthropic", "chat", "augment"):
                if item.get("role") == "assistant":
                    last = i
            elif item.get("type") in ("function_call", "custom_tool_call", "reasoning",
                                      "local_shell_call", "web_search_call") or (
                    item.get("type", "message") == "message" and item.get("role") == "assistant"):
                last = i
        return items[last + 1:]

    def tail_text(self):
        """The tail as JSON text, for substring checks on what is new in this request."""
        return json.dumps(self.tail(), ensure_ascii=False)

    def tool_results(self):
        """Text of each tool result in the tail (Claude tool_result; Codex *_call_output)."""
        if self.api == "gemini":
            return gemini_tool_results(self.tail())
        out = []
        for item in self.tail():
            if not isinstance(item, dict):
                continue
            if self.api == "anthropic":
                content = item.get("content")
                if not isinstance(content, list):
                    continue
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        out.append(flatten(block.get("content")))
            elif self.api == "chat":
                if item.get("role") == "tool":
                    out.append(flatten(item.get("content")))
            elif self.api == "augment":
                out += [b["content"] for b in item.get("content") or () if b.get("type") == "tool_result"]
            elif item.get("type") in ("function_call_output", "custom_tool_call_output"):
                out.append(flatten(item.get("output")))
        return out

    def tool_calls(self):
        """Chat Completions: every (name, arguments dict) the assistant called so far."""
        out = []
        for item in self.items():
            if not isinstance(item, dict) or item.get("role") != "assistant":
                continue
            for call in item.get("tool_calls") or []:
                fn = (call or {}).get("function") or {}
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except ValueError:
                    args = fn.get("arguments")
                out.append((fn.get("name"), args))
        return out

    def user_text(self):
        """Text the user side wrote (prompts, injected context; not tool results)."""
        if self.api == "gemini":
            return gemini_user_text(self.items())
        out = []
        for item in self.items():
            if not isinstance(item, dict):
                continue
            if item.get("type") == "agent_message":  # Codex: a task sent to a sub-agent
                for block in item.get("content") or []:
                    if isinstance(block, dict):
                        out.append(block.get("text") or block.get("encrypted_content") or "")
                continue
            if item.get("role") != "user":
                continue
            content = item.get("content")
            if isinstance(content, str):
                out.append(content)
                continue
            for block in content or []:
                if isinstance(block, dict) and block.get("type") in ("text", "input_text"):
                    out.append(block.get("text") or "")
        return "\n".join(out)


# -- Gemini API (Gemini CLI with GOOGLE_GEMINI_BASE_URL) --------------------------------------------

def augment_items(body):
    """Auggie's conversation as Claude-like messages: each earlier exchange (its request nodes as
    the user's, its response nodes as the assistant's), then this request's nodes; a text node is
    {type: text}, a tool result node {type: tool_result, content}."""
    def user(nodes):
        blocks = []
        for n in nodes or ():
            if n.get("type") == 0:
                blocks.append({"type": "text", "text": (n.get("text_node") or {}).get("content") or ""})
            elif n.get("type") == 1:
                blocks.append({"type": "tool_result", "content": (n.get("tool_result_node") or {}).get("content") or ""})
        return {"role": "user", "content": blocks}
    out = []
    for ex in body.get("chat_history") or ():
        out.append(user(ex.get("request_nodes")))
        if ex.get("request_message"):
            out[-1]["content"].insert(0, {"type": "text", "text": ex["request_message"]})
        out.append({"role": "assistant", "content": ex.get("response_nodes") or []})
    out.append(user(body.get("nodes")))
    if body.get("message"):
        out[-1]["content"].insert(0, {"type": "text", "text": body["message"]})
    return out


def gemini_path(path):
    """(model, streaming) for a Gemini API generate path, else None."""
    if not path.startswith("/v1beta/models/") and not path.startswith("/v1/models/"):
        return None
    name = path.rsplit("/", 1)[-1]
    for verb, stream in ((":streamGenerateContent", True), (":generateContent", False)):
        if name.endswith(verb):
            return name[:-len(verb)], stream
    return None


def gemini_parts(item):
    parts = item.get("parts") if isinstance(item, dict) else None
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def gemini_tool_results(items):
    """Text of each functionResponse part in `items` (Gemini CLI sends tool results as the
    user's functionResponse parts: {name, response: {output} or {error}})."""
    out = []
    for item in items:
        for part in gemini_parts(item):
            if isinstance(part.get("functionResponse"), dict):
                out.append(flatten(part["functionResponse"].get("response")))
    return out


def gemini_user_text(items):
    """Text parts of the user's contents (prompts, hook context; not tool results)."""
    out = []
    for item in items:
        if isinstance(item, dict) and item.get("role", "user") == "user":
            out += [p["text"] for p in gemini_parts(item) if isinstance(p.get("text"), str)]
    return "\n".join(out)


def gemini_response(model, turn, new_id):
    """One GenerateContentResponse for `turn`: text and functionCall parts, finishReason STOP."""
    parts = []
    if turn.text:
        parts.append({"text": turn.text})
    for call in turn.calls:
        args = call.get("args", call.get("input", {}))
        parts.append({"functionCall": {"id": new_id("call"), "name": call["name"], "args": args}})
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP",
                            "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 10, "totalTokenCount": 20},
            "modelVersion": model, "responseId": new_id("resp")}


def gemini_side_turn(request):
    """A side request Gemini CLI makes outside the agent's conversation (the model router's
    classifier, next-speaker and loop checks, session summaries: non-streaming generateContent
    with a JSON response schema or a short utility prompt) -> a Turn, or None when the request
    is the agent's own. Answered with a harmless reply, never with a scripted turn."""
    body = request.body if isinstance(request.body, dict) else {}
    config = body.get("generationConfig") or {}
    if config.get("responseMimeType") == "application/json" or config.get("responseSchema") \
            or config.get("responseJsonSchema"):
        return Turn(text=json.dumps({"reasoning": "scripted", "model_choice": "flash",
                                     "next_speaker": "user", "is_stuck": False}))
    if not body.get("tools"):
        return Turn(text="scripted summary")
    return None


def flatten(value):
    """Text of a content value (string, list of blocks, or block)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(flatten(v) for v in value)
    if isinstance(value, dict):
        for key in ("text", "content", "output"):
            if key in value:
                return flatten(value[key])
        return json.dumps(value, ensure_ascii=False)
    return str(value)


class ModelServer(object):
    """A running scripted server; use as a context manager or call close()."""

    def __init__(self, script=(), lanes=None, name="model"):
        self.script = list(script)
        self.lanes = {k: list(v) for k, v in (lanes or {}).items()}
        self.name = name
        self.requests = []      # every request, in arrival order
        self.refused = []       # proxy/CONNECT attempts to leave the machine
        self.errors = []        # script overruns and turns that raised
        self._lock = threading.Lock()
        self._next = {}
        self._ids = itertools.count(1)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.model = self
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="modelserver",
                                        daemon=True)
        self._thread.start()

    # -- scripting -------------------------------------------------------------------------
    def load(self, script, lanes=None):
        """Replace the script and forget earlier requests (reuse one server across runs)."""
        with self._lock:
            self.script = list(script)
            self.lanes = {k: list(v) for k, v in (lanes or {}).items()}
            self._next = {}
            self.requests = []
            self.refused = []
            self.errors = []

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def model_requests(self, lane=None):
        """Model requests of one lane (None: the main script), in the order they were answered."""
        with self._lock:
            return [r for r in self.requests if r.turn is not None and r.lane == lane]

    def all_model_requests(self):
        with self._lock:
            return [r for r in self.requests if r.turn is not None]

    def side_requests(self):
        with self._lock:
            return [r for r in self.requests if r.turn is None]

    def exhausted(self):
        """True when the main script and every lane have been played to the end."""
        with self._lock:
            if self._next.get(None, 0) < len(self.script):
                return False
            return all(self._next.get(k, 0) >= len(v) for k, v in self.lanes.items())

    def _take_turn(self, request):
        first = request.user_text()
        with self._lock:
            lane = None
            for marker in self.lanes:
                if marker in first:
                    lane = marker
                    break
            turns = self.lanes[lane] if lane is not None else self.script
            index = self._next.get(lane, 0)
            self._next[lane] = index + 1
            request.turn = index
            request.lane = lane
            step = turns[index] if index < len(turns) else None
        if step is None:
            self.errors.append("script exhausted at request %d of lane %r" % (index, lane))
            return say("(script exhausted)")
        if callable(step) and not isinstance(step, Turn):
            try:
                step = step(request)
            except Exception as exc:  # a scripted function failed: end the run cleanly
                self.errors.append("turn %d raised %r" % (index, exc))
                return say("(scripted turn failed)")
        return step

    def new_id(self, prefix):
        return "%s_%04d%s" % (prefix, next(self._ids), "e2e0" * 4)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # keep test output clean
        pass

    @property
    def model(self):
        return self.server.model

    def _read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.headers.get("Content-Encoding", "").lower() == "gzip":
            import gzip
            try:
                raw = gzip.decompress(raw)
            except OSError:
                pass
        try:
            body = json.loads(raw.decode("utf-8")) if raw else None
        except (UnicodeDecodeError, ValueError):
            body = None
        return raw, body

    def _record(self, body=None, raw=b""):
        req = Request(self.command, self.path, dict(self.headers.items()), body, raw)
        with self.model._lock:
            self.model.requests.append(req)
        return req

    def _leaves_machine(self):
        if self.command == "CONNECT":
            return True
        if self.path.startswith("/"):
            return False
        host = urlsplit(self.path).hostname or ""
        return host not in LOOPBACK

    def _refuse(self):
        req = self._record()
        with self.model._lock:
            self.model.refused.append(req)
        self._send_json(403, {"error": "e2e model server: outside network refused"}, close=True)

    def _send_json(self, status, obj, close=False):
        data = json.dumps(obj).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def do_CONNECT(self):
        self._refuse()

    def do_GET(self):
        if self._leaves_machine():
            return self._refuse()
        self._record()
        path = urlsplit(self.path).path
        if path.endswith("/models"):
            return self._send_json(200, {"models": [], "data": [], "object": "list"})
        self._send_json(404, {"error": {"type": "not_found", "message": "not scripted"}})

    def do_HEAD(self):
        if self._leaves_machine():
            return self._refuse()
        self._record()
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        if self._leaves_machine():
            self._read_body()
            return self._refuse()
        raw, body = self._read_body()
        path = urlsplit(self.path).path
        if path == "/v1/messages/count_tokens":
            self._record(body, raw)
            return self._send_json(200, {"input_tokens": max(1, len(raw) // 4)})
        if path == "/v1/messages" and isinstance(body, dict):
            req = self._record(body, raw)
            turn = self.model._take_turn(req)
            if body.get("stream"):
                return self._anthropic_stream(body, turn)
            return self._send_json(200, self._anthropic_message(body, turn))
        if path == "/v1/responses" and isinstance(body, dict):
            req = self._record(body, raw)
            turn = self.model._take_turn(req)
            return self._openai_stream(body, turn)
        if gemini_path(path) and isinstance(body, dict):
            return self._gemini(path, body, raw)
        if path.endswith("/chat/completions") and isinstance(body, dict):
            req = self._record(body, raw)
            turn = self.model._take_turn(req)
            if body.get("stream"):
                return self._chat_stream(body, turn)
            return self._send_json(200, self._chat_completion(body, turn))
        if path in AUGMENT_SIDE:
            self._record(body, raw)
            return self._send_json(200, AUGMENT_SIDE[path])
        if path == "/chat-stream" and isinstance(body, dict):
            req = self._record(body, raw)
            turn = say("Session") if body.get("silent") else self.model._take_turn(req)
            return self._augment_stream(turn)
        self._record(body, raw)
        self._send_json(404, {"error": {"type": "not_found", "message": "not scripted"}})

    do_PUT = do_POST
    do_PATCH = do_POST
    do_DELETE = do_GET

    def _augment_stream(self, turn):
        lines = [{"text": turn.text or "", "nodes": [{"id": 1, "type": 0, "content": turn.text or ""}]}]
        for i, call in enumerate(turn.calls):
            args = call.get("input", call.get("arguments", {}))
            lines.append({"text": "", "nodes": [{"id": i + 2, "type": 5, "tool_use": {
                "tool_use_id": self.model.new_id("tu"), "tool_name": call["name"],
                "input_json": args if isinstance(args, str) else json.dumps(args)}}]})
        lines[-1]["stop_reason"] = 3 if turn.calls else 1
        data = "".join(json.dumps(line) + "\n" for line in lines).encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    # -- SSE ---------------------------------------------------------------------------------
    def _start_sse(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()

    def _event(self, name, data):
        chunk = "event: %s\ndata: %s\n\n" % (name, json.dumps(data))
        self.wfile.write(chunk.encode("utf-8"))
        self.wfile.flush()

    # -- Anthropic ---------------------------------------------------------------------------
    def _anthropic_blocks(self, turn):
        blocks = []
        if turn.text:
            blocks.append({"type": "text", "text": turn.text})
        for call in turn.calls:
            blocks.append({"type": "tool_use", "id": self.model.new_id("toolu"),
                           "name": call["name"], "input": call.get("input", {})})
        return blocks

    def _anthropic_message(self, body, turn):
        blocks = self._anthropic_blocks(turn)
        return {"id": self.model.new_id("msg"), "type": "message", "role": "assistant",
                "model": body.get("model", "claude-e2e"), "content": blocks,
                "stop_reason": "tool_use" if turn.calls else "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 10}}

    def _anthropic_stream(self, body, turn):
        self._start_sse()
        msg = self._anthropic_message(body, turn)
        blocks = msg["content"]
        start = dict(msg, content=[], stop_reason=None)
        start["usage"] = {"input_tokens": 10, "output_tokens": 1}
        self._event("message_start", {"type": "message_start", "message": start})
        for i, block in enumerate(blocks):
            if block["type"] == "text":
                self._event("content_block_start", {"type": "content_block_start", "index": i,
                                                    "content_block": {"type": "text", "text": ""}})
                self._event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                    "delta": {"type": "text_delta",
                                                              "text": block["text"]}})
            else:
                head = dict(block, input={})
                self._event("content_block_start", {"type": "content_block_start", "index": i,
                                                    "content_block": head})
                self._event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                    "delta": {"type": "input_json_delta",
                                                              "partial_json": json.dumps(
                                                                  block["input"])}})
            self._event("content_block_stop", {"type": "content_block_stop", "index": i})
        self._event("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": msg["stop_reason"],
                                                "stop_sequence": None},
                                      "usage": {"output_tokens": 10}})
        self._event("message_stop", {"type": "message_stop"})

    # -- Gemini API --------------------------------------------------------------------------
    def _gemini(self, path, body, raw):
        """A generate request: the agent's own turns come from the script, side requests
        (gemini_side_turn) get a harmless reply; streaming answers one SSE `data:` chunk."""
        model, stream = gemini_path(path)
        req = self._record(body, raw)
        turn = gemini_side_turn(req)
        if turn is None:
            turn = self.model._take_turn(req)
        reply = gemini_response(model, turn, self.model.new_id)
        if not stream:
            return self._send_json(200, reply)
        self._start_sse()
        self.wfile.write(("data: %s\r\n\r\n" % json.dumps(reply)).encode("utf-8"))
        self.wfile.flush()

    # -- OpenAI Responses --------------------------------------------------------------------
    def _openai_items(self, turn):
        items = []
        if turn.text:
            items.append({"type": "message", "role": "assistant", "status": "completed",
                          "id": self.model.new_id("msg"),
                          "content": [{"type": "output_text", "text": turn.text,
                                       "annotations": []}]})
        for call in turn.calls:
            call_id = self.model.new_id("call")
            if call["kind"] == "custom":
                items.append({"type": "custom_tool_call", "id": self.model.new_id("ctc"),
                              "status": "completed", "call_id": call_id, "name": call["name"],
                              "input": call["input"]})
            else:
                args = call.get("arguments", {})
                item = {"type": "function_call", "id": self.model.new_id("fc"),
                        "status": "completed", "call_id": call_id, "name": call["name"],
                        "arguments": args if isinstance(args, str) else json.dumps(args)}
                if call.get("namespace"):
                    item["namespace"] = call["namespace"]
                items.append(item)
        return items

    def _openai_stream(self, body, turn):
        self._start_sse()
        rid = self.model.new_id("resp")
        base = {"id": rid, "object": "response", "created_at": int(time.time()),
                "model": body.get("model", "gpt-e2e"), "status": "in_progress", "output": []}
        self._event("response.created", {"type": "response.created", "response": base})
        items = self._openai_items(turn)
        for i, item in enumerate(items):
            added = dict(item)
            if item["type"] == "message":
                added["content"] = []
                added["status"] = "in_progress"
            self._event("response.output_item.added", {"type": "response.output_item.added",
                                                       "output_index": i, "item": added})
            if item["type"] == "message":
                self._event("response.output_text.delta", {
                    "type": "response.output_text.delta", "item_id": item["id"],
                    "output_index": i, "content_index": 0, "delta": turn.text})
            self._event("response.output_item.done", {"type": "response.output_item.done",
                                                      "output_index": i, "item": item})
        done = dict(base, status="completed", output=items,
                    usage={"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                           "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0},
                           "total_tokens": 20})
        self._event("response.completed", {"type": "response.completed", "response": done})

    # -- OpenAI Chat Completions -------------------------------------------------------------
    def _chat_tool_calls(self, turn):
        calls = []
        for call in turn.calls:
            args = call.get("arguments", call.get("input", {}))
            if not isinstance(args, str):
                args = json.dumps(args)
            calls.append({"id": self.model.new_id("call"), "type": "function",
                          "function": {"name": call["name"], "arguments": args}})
        return calls

    def _chat_completion(self, body, turn):
        calls = self._chat_tool_calls(turn)
        message = {"role": "assistant", "content": turn.text}
        if calls:
            message["tool_calls"] = calls
        return {"id": self.model.new_id("chatcmpl"), "object": "chat.completion",
                "created": int(time.time()), "model": body.get("model", "chat-e2e"),
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": "tool_calls" if calls else "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}

    def _chat_stream(self, body, turn):
        """SSE chunks: a role delta, the text, each tool call (its head, then its arguments in
        two deltas, as real servers split them), a finish_reason, an optional usage chunk."""
        self._start_sse()
        cid = self.model.new_id("chatcmpl")
        base = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()),
                "model": body.get("model", "chat-e2e")}

        def chunk(delta, finish=None, **extra):
            data = dict(base, choices=[{"index": 0, "delta": delta, "logprobs": None,
                                        "finish_reason": finish}], **extra)
            self.wfile.write(("data: %s\n\n" % json.dumps(data)).encode("utf-8"))
            self.wfile.flush()

        chunk({"role": "assistant", "content": ""})
        if turn.text:
            chunk({"content": turn.text})
        calls = self._chat_tool_calls(turn)
        for i, call in enumerate(calls):
            args = call["function"]["arguments"]
            half = len(args) // 2
            chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                   "function": {"name": call["function"]["name"],
                                                "arguments": ""}}]})
            for part in (args[:half], args[half:]):
                if part:
                    chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]})
        chunk({}, finish="tool_calls" if calls else "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            data = dict(base, choices=[], usage={"prompt_tokens": 10, "completion_tokens": 10,
                                                 "total_tokens": 20})
            self.wfile.write(("data: %s\n\n" % json.dumps(data)).encode("utf-8"))
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
