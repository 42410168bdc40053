"""Schemathesis hooks for scripts/conformance (loaded through SCHEMATHESIS_HOOKS).

Webhook subscriptions the tester creates would make the gateway deliver events to whatever host it
generated (`http://0.com/…`): the test traffic must stay on this machine. Before a subscription is
sent, the host of an http(s) `url` is replaced by a closed loopback port, so the request keeps its
shape (scheme, path, query, and whatever makes it valid or not) and every delivery it leads to is a
refused connection on 127.0.0.1.

A listener's pull (`GET /public/v1/webhooks/{id}/pull`) is a long poll: with nothing due it waits
`wait` seconds (up to 25, and 25 when left out), and two thirds of the owner run's time went to
waiting. A valid wait above 1, or none, is sent as 1: the answer is the same (none due, after the
wait), the time is not. Invalid waits (negative, above 25, not a number) are sent as generated; the
default wait and long ones are the end-to-end suite's (tests/e2e/listen.test.mjs).
"""

import re

import schemathesis

LOOPBACK = "127.0.0.1:9"
# How a URL parser of the WHATWG kind (the server's) reads http(s) URLs: tabs and newlines dropped,
# leading and trailing controls and spaces trimmed, any run of slashes or backslashes after the
# scheme, then [userinfo@]host[:port] up to the path, query or fragment.
URL = re.compile(r"^(?P<scheme>https?:)[/\\]*(?P<authority>[^/\\?#]*)(?P<rest>.*)$", re.S | re.I)


def loopback(url):
    """The URL with its host and port replaced by LOOPBACK; anything else as it was."""
    text = re.sub(r"[\t\n\r]", "", url).strip("".join(map(chr, range(0x21))))
    match = URL.match(text)
    if match is None:
        return url
    userinfo = match["authority"].rpartition("@")[0]
    return f"{match['scheme']}//{userinfo + '@' if userinfo else ''}{LOOPBACK}{match['rest']}"


def short_wait(query):
    """The query with a valid `wait` above 1, or none, as 1; anything else as it was."""
    query = query or {}
    if "wait" not in query:
        return {**query, "wait": 1}
    wait = query["wait"]
    text = str(wait).strip() if isinstance(wait, (int, str)) and not isinstance(wait, bool) else ""
    if text.isdigit() and 1 < int(text) <= 25:
        return {**query, "wait": 1}
    return query


@schemathesis.hook
def before_call(context, case, kwargs):
    if case.operation.path == "/public/v1/webhooks/{id}/pull":
        case.query = short_wait(case.query)
    if case.operation.path == "/public/v1/webhooks" and case.method.upper() == "POST":
        body = case.body
        if isinstance(body, dict) and isinstance(body.get("url"), str):
            case.body = {**body, "url": loopback(body["url"])}
