// One POST that must create: the JSON answered, or an error naming the path and what came back.
// Shared by the kit and scripts/seed-demo.mjs (no dependency: only fetch).
export async function created(base, path, token, body) {
  const res = await fetch(base + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const json = await res.json();
  if (res.status !== 201) throw new Error(`${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}
