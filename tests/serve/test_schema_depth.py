"""Issue 45, finding 3 (its depth form): a deeply nested schema is a 400 before xgrammar reads it.

xgrammar's EBNF for a schema grows with the square of its nesting depth: a 24 KB tool schema nested
450 objects deep took 10 s to convert, and a tool's schema is converted on a request thread (before
the bounded compile executor), so 40 such requests held every request thread as the review's enum did.
The byte, enum and property limits let it through; the depth limit does not.
"""

import time

import httpx2


def nested(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def chat(url: str, **extra) -> httpx2.Response:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0}
    return httpx2.post(url + "/v1/chat/completions", json=body | extra, timeout=120)


def test_finding3_a_deeply_nested_schema_is_a_400_naming_the_depth_limit(live):
    deep = nested(300)  # 600 levels of JSON objects, 16 KB: under the byte, enum and property limits
    replies = {}
    for name, extra in (("response_format", {"response_format": {"type": "json_schema",
                                                                  "json_schema": {"name": "deep", "schema": deep}}}),
                        ("tools", {"tools": [{"type": "function", "function": {"name": "f", "parameters": deep}}],
                                   "tool_choice": "required"})):
        started = time.monotonic()
        reply = chat(live.url, **extra)
        replies[name] = (reply.status_code, round(time.monotonic() - started, 2), reply.text[:160])
    for name, (status, seconds, text) in replies.items():
        assert status == 400 and "levels deep" in text and "limit of 64" in text and "--max-schema-depth" in text, \
            replies
        assert seconds < 5, replies


def test_an_ordinary_nested_schema_still_works(live):
    reply = chat(live.url, max_tokens=64, response_format={
        "type": "json_schema", "json_schema": {"name": "ten", "schema": nested(10)}})
    assert reply.status_code == 200, reply.text[:300]
