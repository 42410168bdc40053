// SPEC §26 "First contact": the README's five-minute tour, run as a newcomer would — scripts/dev
// --demo-origin on ports that are not the defaults, the `export` line it prints, then every
// command of the tour's shell blocks in order, exactly as written (a placeholder `export X=…`
// is filled from the answer before it, as the README says). Ctrl-C then leaves nothing running.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { eventually, freePort, listening, ROOT, sleep } from './harness.mjs';

/** The commands of the tour's shell blocks after the first (which starts the gateway). */
function tourCommands() {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const tour = readme.slice(readme.indexOf('## A five-minute tour'), readme.indexOf('\n## ', readme.indexOf('## A five-minute tour') + 5));
  const blocks = [...tour.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]);
  assert.ok(blocks.length >= 6, 'the tour has its blocks');
  return blocks.slice(1).flatMap((block) => block.replace(/\\\n\s*/g, ' ').split('\n')
    .map((line) => line.replace(/\s+#.*$/, '').trim())
    .filter((line) => line && !line.startsWith('#')));
}

test('the README tour works command by command on other ports, and Ctrl-C stops everything', { timeout: 300_000 }, async () => {
  const [port, demoPort] = [await freePort(), await freePort()];
  const dev = spawn('scripts/dev', ['--demo-origin'], {
    cwd: ROOT, detached: true, env: { ...process.env, PORT: String(port), DEMO_ORIGIN_PORT: String(demoPort) },
  });
  let output = '';
  dev.stdout.on('data', (d) => { output += d; });
  dev.stderr.on('data', (d) => { output += d; });
  const exited = new Promise((resolve) => dev.on('close', resolve));
  try {
    for (let i = 0; i < 480 && !/Ready in \d+s/.test(output); i += 1) await sleep(500);
    assert.match(output, /Ready in \d+s/, output.slice(-3000));
    const exportLine = output.match(/^\s*export (GH=\S+ DEMO=\S+ OWNER=\S+)$/m);
    assert.ok(exportLine, 'scripts/dev prints the export line of the tour');
    const env = { ...process.env };
    for (const pair of exportLine[1].split(' ')) {
      const [name, value] = [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)];
      env[name] = value;
    }
    assert.equal(env.GH, `http://127.0.0.1:${port}`);
    assert.equal(env.DEMO, `http://127.0.0.1:${demoPort}`);

    let last = '';
    let requestId;
    for (const command of tourCommands()) {
      const placeholder = command.match(/^export (\w+)=\S*…$/);
      if (placeholder) {
        // "export KEY=gh_s_…  # the "key" above": filled from the last answer.
        const answer = JSON.parse(last.slice(last.indexOf('{')));
        env[placeholder[1]] = placeholder[1] === 'KEY' ? answer.key : answer.id;
        assert.ok(env[placeholder[1]], `${command}: found in ${last}`);
        continue;
      }
      assert.doesNotMatch(command, /8787|8790/, 'no command names a default port');
      const expanded = command.replace('<X-Request-Id>', requestId ?? '<none>');
      // A row arrives within a second or two (the README says so); answers that are still being
      // delivered (a webhook) are read again the same way a reader would.
      for (let tries = 0; ; tries += 1) {
        last = execFileSync('bash', ['-c', expanded], { env, encoding: 'utf8', timeout: 30_000 });
        const unfinished = /"error":\{/.test(last) || (/deliveries/.test(command) && !/"delivered"/.test(last));
        if (!unfinished || tries >= 20) break;
        await sleep(500);
      }
      assert.doesNotMatch(last, /"error":\{/, `${expanded}\n→ ${last}`);
      if (/curl -si/.test(command)) {
        assert.match(last, /^HTTP\/1\.1 2\d\d/, `${expanded}\n→ ${last}`);
        requestId = last.match(/^x-request-id: (\S+)/mi)?.[1];
      } else if (/curl/.test(command)) {
        assert.doesNotThrow(() => JSON.parse(last), `${expanded}\n→ ${last}`);
      }
      if (command.includes('<X-Request-Id>')) assert.equal(JSON.parse(last).request_id, requestId);
      if (/deliveries/.test(command)) assert.match(last, /"delivered"/);
    }
    // The commands above ran synchronously: the demo origin's lines are read from the pipe only
    // while this test awaits (a delivery answered at the first look left no wait in between).
    const received = /\[demo origin\] webhook received: contact\.created/;
    await eventually(() => received.test(output), 10_000);
    assert.match(output, received, 'the demo origin received the webhook');
  } finally {
    process.kill(-dev.pid, 'SIGINT');
    await Promise.race([exited, sleep(30_000)]);
  }
  assert.equal(await listening(port), false, 'Ctrl-C stopped the gateway');
  assert.equal(await listening(demoPort), false, 'Ctrl-C stopped the demo origin');
});
