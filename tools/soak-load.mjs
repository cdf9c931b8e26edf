// The client side of tools/soak.sh: CONCURRENCY loops of mixed requests
// against one pagedllm server for SECONDS, then a JSON summary on stdout.
//
//   node tools/soak-load.mjs PORT SECONDS CONCURRENCY WINDOWS_FILE
//
// Each loop picks, in turn, a streamed completion, a whole (non-streamed)
// one, a chat stream with n = 3, a whole completion with n = 2, and a
// stream it abandons after a few events (the abort). A request fails when
// its status is not 200, its stream does not end with [DONE] or carries an
// error, or its body lacks the choices asked for. Failures that start or end
// inside a window listed in WINDOWS_FILE (lines "START_MS END_MS", written
// by soak.sh around the engine restart) are counted as cut by the restart;
// every other failure is a failure, listed with its reason. Node's own http
// only, one connection per request (no keep-alive), so a reload's closing
// of idle keep-alive connections cannot race a request onto a dead one.

import http from 'node:http';
import fs from 'node:fs';

const [port, seconds, concurrency, windowsFile] = process.argv.slice(2);
const deadline = Date.now() + Number(seconds) * 1000;
const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });

const counts = { ok: 0, aborted: 0, failed: 0, cut_by_restart: 0 };
const byKind = {};
const failures = [];

const kinds = [
    { name: 'stream', path: '/v1/completions', stream: true, n: 1,
      body: (i) => ({ prompt: `soak ${i} stream`, max_tokens: 8 + i % 40,
                      ignore_eos: true, stream: true }) },
    { name: 'whole', path: '/v1/completions', stream: false, n: 1,
      body: (i) => ({ prompt: `soak ${i} whole`, max_tokens: 8 + i % 24,
                      ignore_eos: true, temperature: 0.8 }) },
    { name: 'chat_n3', path: '/v1/chat/completions', stream: true, n: 3,
      body: (i) => ({ messages: [{ role: 'user', content: `soak ${i}` }],
                      max_tokens: 12, ignore_eos: true, n: 3,
                      stream: true }) },
    { name: 'whole_n2', path: '/v1/completions', stream: false, n: 2,
      body: (i) => ({ prompt: `soak ${i} n2`, max_tokens: 10,
                      ignore_eos: true, n: 2, temperature: 1 }) },
    { name: 'abort', path: '/v1/completions', stream: true, n: 1,
      abortAfter: 3,
      body: (i) => ({ prompt: `soak ${i} abort`, max_tokens: 200,
                      ignore_eos: true, stream: true }) },
];

function once(kind, i) {
    return new Promise((resolve) => {
        const started = Date.now();
        const payload = JSON.stringify(kind.body(i));
        let settled = false;
        const done = (outcome, why) => {
            if (settled) return;
            settled = true;
            resolve({ outcome, why, started, ended: Date.now() });
        };
        const req = http.request({
            host: '127.0.0.1', port: Number(port), path: kind.path,
            method: 'POST', agent,
            headers: { 'Content-Type': 'application/json',
                       'Content-Length': Buffer.byteLength(payload) },
        }, (res) => {
            let body = '';
            let events = 0;
            res.setEncoding('utf8');
            res.on('data', (d) => {
                body += d;
                if (kind.abortAfter && res.statusCode === 200) {
                    events = (body.match(/^data: /gm) || []).length;
                    if (events >= kind.abortAfter) {
                        req.destroy();
                        done('aborted');
                    }
                }
            });
            res.on('end', () => done(...judge(kind, res.statusCode, body)));
            res.on('error', (e) => done('failed', `response: ${e.message}`));
            res.on('aborted', () => done('failed', 'response cut'));
        });
        req.setTimeout(120000, () => {
            req.destroy();
            done('failed', 'no answer in 120 s');
        });
        req.on('error', (e) => done('failed', `request: ${e.message}`));
        req.end(payload);
    });
}

function judge(kind, status, body) {
    if (status !== 200) {
        return ['failed', `status ${status}: ${body.slice(0, 200)}`];
    }
    if (kind.abortAfter) {
        return ['failed', 'stream ended before the abort'];
    }
    if (kind.stream) {
        if (!/data: \[DONE\]\n\n$/.test(body)) {
            return ['failed', `stream without [DONE]: ${body.slice(-200)}`];
        }
        if (/^data: \{"error"/m.test(body)) {
            return ['failed', 'error event in the stream'];
        }
        const finished = new Set();
        for (const line of body.split('\n')) {
            if (!line.startsWith('data: {')) continue;
            for (const c of JSON.parse(line.slice(6)).choices || []) {
                if (c.finish_reason) finished.add(c.index);
            }
        }
        return finished.size === kind.n
            ? ['ok'] : ['failed', `${finished.size} of ${kind.n} finished`];
    }
    let j;
    try {
        j = JSON.parse(body);
    } catch (e) {
        return ['failed', `body is not JSON: ${body.slice(0, 200)}`];
    }
    return j.choices && j.choices.length === kind.n
        ? ['ok'] : ['failed', `choices: ${body.slice(0, 200)}`];
}

function readWindows() {
    try {
        return fs.readFileSync(windowsFile, 'utf8').trim().split('\n')
            .filter(Boolean).map((l) => l.split(' ').map(Number));
    } catch (e) {
        return [];
    }
}

// successes are only counted; failures are kept (a handful, or a fault)
// until the end, when the restart's windows are known
let requests = 0;
const failed = [];

function count(kind, outcome) {
    byKind[kind] ??= { ok: 0, aborted: 0, failed: 0, cut_by_restart: 0 };
    counts[outcome]++;
    byKind[kind][outcome]++;
}

async function loop(id) {
    let i = id;
    while (Date.now() < deadline) {
        const kind = kinds[i % kinds.length];
        const r = await once(kind, i);
        requests++;
        if (r.outcome === 'failed') {
            r.kind = kind.name;
            failed.push(r);
        } else {
            count(kind.name, r.outcome);
        }
        i += Number(concurrency);
    }
}

const loops = [];
for (let c = 0; c < Number(concurrency); c++) loops.push(loop(c));
await Promise.all(loops);

const windows = readWindows();
const inWindow = (t) => windows.some(([a, b]) => t >= a && t <= b);

for (const r of failed) {
    const cut = inWindow(r.started) || inWindow(r.ended);
    count(r.kind, cut ? 'cut_by_restart' : 'failed');
    if (!cut && failures.length < 50) {
        failures.push({ kind: r.kind, at: new Date(r.ended).toISOString(),
                        why: r.why });
    }
}

console.log(JSON.stringify({ requests, ...counts,
                             by_kind: byKind, failures }, null, 1));
