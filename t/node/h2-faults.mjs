// HTTP/2 and TLS faults for t/65-h2-faults.t, with node's own http2 and
// tls modules; prints one JSON object of what happened, the test judges.
//
//   node h2-faults.mjs reset URL         a stream reset mid-generation
//   node h2-faults.mjs many URL N        N concurrent streams, one session
//   node h2-faults.mjs handshakes URL CA CUTS STREAMS
//                                        STREAMS TLS streams running while
//                                        CUTS clients drop their handshakes
//
// URL is the server's origin (http:// for h2c, https:// for TLS);
// /v1/completions and /pagedllm/status are asked on it.

import http2 from 'node:http2';
import tls from 'node:tls';
import fs from 'node:fs';

const [mode, origin, ...rest] = process.argv.slice(2);

function body(prompt, maxTokens) {
    return JSON.stringify({ prompt, max_tokens: maxTokens, stream: true,
                            ignore_eos: true });
}

// One streamed completion on session s: { status, events, done, reset,
// error }; onEvent(n) after each event, which may reset the stream.
function stream(s, prompt, maxTokens, onEvent) {
    return new Promise((resolve) => {
        const r = { status: 0, events: 0, done: false, error: null };
        const req = s.request({ ':method': 'POST',
                                ':path': '/v1/completions',
                                'content-type': 'application/json' });
        let buf = '';
        req.setEncoding('utf8');
        req.on('response', (h) => { r.status = h[':status']; });
        req.on('data', (d) => {
            buf += d;
            let i;
            while ((i = buf.indexOf('\n\n')) >= 0) {
                const ev = buf.slice(0, i);
                buf = buf.slice(i + 2);
                if (ev === 'data: [DONE]') {
                    r.done = true;
                } else if (ev.startsWith('data: ')) {
                    r.events++;
                    if (onEvent) onEvent(r.events, req);
                }
            }
        });
        req.on('close', () => { r.rst = req.rstCode; resolve(r); });
        req.on('error', (e) => { r.error = e.code || e.message; });
        req.end(body(prompt, maxTokens));
    });
}

function get(s, path) {
    return new Promise((resolve, reject) => {
        const req = s.request({ ':path': path });
        let buf = '';
        req.setEncoding('utf8');
        req.on('data', (d) => { buf += d; });
        req.on('end', () => resolve(JSON.parse(buf)));
        req.on('error', reject);
        req.end();
    });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// polls the status on s until no request runs or waits (or 20 s pass)
async function idle(s) {
    const deadline = Date.now() + 20000;
    let st;
    do {
        st = await get(s, '/pagedllm/status');
        if (st.requests.running === 0 && st.requests.waiting === 0) break;
        await sleep(50);
    } while (Date.now() < deadline);
    return st;
}

function connect(ca) {
    const s = http2.connect(origin, ca ? { ca } : {});
    s.on('error', () => {});
    return s;
}

async function reset() {
    const s = connect();
    let goaway = false;
    s.on('goaway', () => { goaway = true; });
    const before = await get(s, '/pagedllm/status');

    // A is reset (RST_STREAM CANCEL) after 5 events; B and C share the
    // session and run past that point
    const a = stream(s, 'reset me', 1500, (n, req) => {
        if (n === 5) req.close(http2.constants.NGHTTP2_CANCEL);
    });
    const b = stream(s, 'neighbour one', 300);
    const c = stream(s, 'neighbour two', 300);
    const [ra, rb, rc] = await Promise.all([a, b, c]);

    const after = await idle(s);
    const d = await stream(s, 'after the reset', 8);
    console.log(JSON.stringify({
        a: ra, b: rb, c: rc, d, goaway, closed: s.closed,
        before, after,
    }));
    s.close();
}

async function many(n) {
    const s = connect();
    const all = [];
    for (let i = 0; i < n; i++) all.push(stream(s, `stream ${i}`, 16));
    const res = await Promise.all(all);
    const after = await idle(s);
    console.log(JSON.stringify({
        n,
        ok: res.filter((r) => r.status === 200 && r.done && r.events === 16)
               .length,
        bad: res.filter((r) => !(r.status === 200 && r.done)).slice(0, 5),
        after,
    }));
    s.close();
}

// One TLS client that drops its connection after `ms` (its handshake
// under way, or just done); whether the handshake had finished.
function cut(url, ca, ms) {
    return new Promise((resolve) => {
        const sock = tls.connect({ host: url.hostname, port: url.port, ca,
                                   ALPNProtocols: ['h2'] });
        let secure = false;
        sock.on('secureConnect', () => { secure = true; });
        sock.on('error', () => {});
        setTimeout(() => {
            sock.destroy();
            resolve(secure);
        }, ms);
    });
}

// Tokens of each stream that runs through the cuts: enough that the
// streams outlast the cuts on an idle machine too (at 200 tokens an idle
// 2-core machine finished all 20 before the 400th cut).
const STREAM_TOKENS = 2000;

async function handshakes(caFile, cuts, streams) {
    const ca = fs.readFileSync(caFile);
    const url = new URL(origin);
    const s = connect(ca);
    const running = [];
    let finished = 0;
    for (let i = 0; i < streams; i++) {
        running.push(stream(s, `tls ${i}`, STREAM_TOKENS).then((r) => {
            finished++;
            return r;
        }));
    }

    let midway = 0;
    for (let i = 0; i < cuts; i += 20) {
        const batch = [];
        for (let j = i; j < Math.min(cuts, i + 20); j++) {
            batch.push(cut(url, ca, j % 4));
        }
        midway += (await Promise.all(batch)).filter((x) => !x).length;
    }
    const runningThrough = streams - finished;

    const res = await Promise.all(running);
    const after = await idle(s);
    const fresh = connect(ca);
    const late = await stream(fresh, 'after the cuts', 8);
    console.log(JSON.stringify({
        cuts, midway, running_through: runningThrough,
        ok: res.filter((r) => r.status === 200 && r.done).length,
        streams, late, after,
    }));
    s.close();
    fresh.close();
}

if (mode === 'reset') {
    await reset();
} else if (mode === 'many') {
    await many(Number(rest[0]));
} else if (mode === 'handshakes') {
    await handshakes(rest[0], Number(rest[1]), Number(rest[2]));
} else {
    console.error(`unknown mode ${mode}`);
    process.exit(2);
}
