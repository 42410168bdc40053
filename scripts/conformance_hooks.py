"""Schemathesis hooks for scripts/conformance (loaded through SCHEMATHESIS_HOOKS).

Webhook subscriptions the tester creates would make the gateway deliver events to whatever host it
generated (`http://0.com/…`): the test traffic must stay on this machine. Before a subscription is
sent, the host of an http(s) `url` is replaced by a closed loopback port, so the request keeps its
shape (scheme, path, query, and whatever makes it valid or not) and every delivery it leads to is a
refused connection on 127.0.0.1.
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


@schemathesis.hook
def before_call(context, case, kwargs):
    if case.operation.path == "/public/v1/webhooks" and case.method.upper() == "POST":
        body = case.body
        if isinstance(body, dict) and isinstance(body.get("url"), str):
            case.body = {**body, "url": loopback(body["url"])}
