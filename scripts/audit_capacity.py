#!/usr/bin/env python3
"""Bytes per audit row in each tier (SPEC §18), measured on the real schema.

The hot tier: migrations-audit/ applied to a fresh SQLite database (D1 is SQLite), 100,000
realistic rows inserted the way the consumer does (INSERT OR IGNORE, then the aggregate and the
`counted` mark), then the file size divided by the rows. The cold tier: the same rows as the
roll-up writes them (NDJSON, gzip, one member per 5,000-row chunk). Prints both, and the capacity
they give at 10 … 10,000 requests/s with the default AUDIT_HOT_SECONDS (3,600).
"""
import gzip
import json
import os
import random
import sqlite3
import tempfile
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = 100_000
HOT_SECONDS = 3_600
random.seed(7)

COLUMNS = ["ts", "request_id", "project_id", "key_id", "key_prefix", "method", "path", "route", "status",
           "response_bytes", "response_time_ms", "ip", "user_agent", "idempotency_key", "replayed",
           "original_request_id", "rate_limit_remaining", "error_code", "trace_id"]


def row(i):
    ts = 1_795_000_000_000 + i * 36
    status = random.choice([200] * 40 + [201] * 5 + [404, 422, 429, 500])
    contact = f"con_{uuid.uuid4().hex[:26]}"
    method, path, route = random.choice([
        ("GET", f"/public/v1/contacts/{contact}", "/public/v1/contacts/{id}"),
        ("POST", "/public/v1/contacts", "/public/v1/contacts"),
        ("GET", "/public/v1/contacts?limit=50", "/public/v1/contacts"),
        ("POST", "/v1/track", "/v1/track"),
    ])
    h = f"{ts:012x}"
    rid = f"{h[:8]}-{h[8:]}-7{random.getrandbits(12):03x}-{random.choice('89ab')}{random.getrandbits(12):03x}-{random.getrandbits(48):012x}"
    return {
        "ts": ts, "request_id": rid, "project_id": f"prj_{i % 20:026d}", "key_id": f"key_{i % 60:026d}",
        "key_prefix": "gh_s_h0WbisH", "method": method, "path": path, "route": route, "status": status,
        "response_bytes": random.randint(50, 4000), "response_time_ms": random.randint(2, 80),
        "ip": f"2001:db8:{random.getrandbits(16):x}::{random.getrandbits(16):x}",
        "user_agent": "gatehouse-client/0.1 (rust; reqwest)",
        "idempotency_key": str(uuid.uuid4()) if method == "POST" else None, "replayed": 0,
        "original_request_id": None, "rate_limit_remaining": random.randint(0, 2000),
        "error_code": None if status < 400 else "NOT_FOUND",
        # Every request has a W3C trace id (SPEC §25): the client's, or one the gateway started.
        "trace_id": f"{random.getrandbits(128):032x}",
    }


def main():
    rows = [row(i) for i in range(ROWS)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "audit.sqlite")
        db = sqlite3.connect(path)
        for name in sorted(os.listdir(os.path.join(ROOT, "migrations-audit"))):
            db.executescript(open(os.path.join(ROOT, "migrations-audit", name)).read())
        insert = f"INSERT OR IGNORE INTO audit_log ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
        for start in range(0, ROWS, 100):
            with db:
                db.executemany(insert, [[r[c] for c in COLUMNS] for r in rows[start:start + 100]])
                db.execute("""INSERT INTO audit_daily (project_id, key_id, day, method, route, total, client_errors, server_errors)
                  SELECT project_id, key_id, date(ts / 1000, 'unixepoch'), method, coalesce(route, path), count(*),
                         sum(status BETWEEN 400 AND 499), sum(status >= 500)
                  FROM audit_log WHERE counted = 0 AND project_id IS NOT NULL AND key_id IS NOT NULL
                  GROUP BY 1, 2, 3, 4, 5
                  ON CONFLICT (project_id, key_id, day, method, route) DO UPDATE SET
                    total = total + excluded.total, client_errors = client_errors + excluded.client_errors,
                    server_errors = server_errors + excluded.server_errors""")
                db.execute("UPDATE audit_log SET counted = 1 WHERE counted = 0")
        db.execute("VACUUM")
        db.close()
        hot = os.path.getsize(path) / ROWS
    cold = sum(len(gzip.compress("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows[s:s + 5000]).encode()))
               for s in range(0, ROWS, 5000)) / ROWS
    print(f"hot tier (D1, with its indexes): {hot:.0f} bytes per row; cold tier (R2, gzip NDJSON): {cold:.0f} bytes per row")
    print("requests/s   hot tier in D1 (1 h window + 1 h roll-up lag)   cold tier per 90 days in R2")
    for rps in (10, 100, 1_000, 10_000):
        d1 = rps * 2 * HOT_SECONDS * hot
        r2 = rps * 90 * 86_400 * cold
        print(f"{rps:>10}   {d1 / 1e9:>10.3f} GB{'' if d1 < 5e9 else '  (over 5 GB in one: raise AUDIT_DATABASES)':<42}   {r2 / 1e12:>8.3f} TB")


if __name__ == "__main__":
    main()
