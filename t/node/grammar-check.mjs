// Independent checks of the grammar engine (t/61-structured.t).
//
//   node grammar-check.mjs prop GRAMMAR_CLI FIXTURE_DIR
//     the property tests: random strings and the automaton's own samples
//     for every regex of regexes.json, matched by the CLI (--match) and by
//     node's RegExp (whole string, u flag): they must agree, and every
//     prefix of a match must be a viable prefix; samples of every schema
//     of schemas.json must parse and validate with ajv.
//   node grammar-check.mjs validate FILE
//     FILE: [{schema | regex, text}] (finished outputs): each must parse
//     and validate with ajv, or match the regex.
// Prints one JSON object: { checked, failures: [...] }.

import { createRequire } from 'module';
import { execFileSync } from 'child_process';
import { readFileSync } from 'fs';
import { dirname } from 'path';
import { fileURLToPath } from 'url';

const require = createRequire(`${dirname(fileURLToPath(import.meta.url))}/package.json`);
const Ajv2020 = require('ajv/dist/2020').default;
const addFormats = require('ajv-formats').default;

const ajv = new Ajv2020({ strict: false, allErrors: false });
addFormats(ajv);

const failures = [];
let checked = 0;
const hex = (s) => Buffer.from(s, 'utf8').toString('hex');

function fail(what) {
    if (failures.length < 50) {
        failures.push(what);
    }
}

function cli(bin, args, input) {
    return execFileSync(bin, args, { input, maxBuffer: 1 << 26 }).toString();
}

// deterministic randomness
let rng = 12345;
function rand(n) {
    rng = (rng * 1103515245 + 12345) & 0x7fffffff;
    return rng % n;
}

function regexProp(bin, re) {
    const js = new RegExp(`^(?:${re})$`, 'u');
    const alphabet = [...new Set([...re, 'a', 'b', '0', '9', '-', ' ', 'é',
                                  '"', '\\', '\n', 'x', '{', '.', 'Z'])];
    const strings = [];
    for (let i = 0; i < 400; i++) {
        let s = '';
        const len = rand(9);
        for (let j = 0; j < len; j++) {
            s += alphabet[rand(alphabet.length)];
        }
        strings.push(s);
    }
    const samples = cli(bin, ['--regex', re, '--sample', '100', '--seed',
                              String(rand(1000))]).split('\n')
        .filter((l) => l.length > 0 || false);
    for (const h of samples) {
        strings.push(Buffer.from(h, 'hex').toString('utf8'));
    }
    // the empty string is one sample that prints as an empty line
    strings.push('');

    const answers = cli(bin, ['--regex', re, '--match'],
                        strings.map(hex).join('\n') + '\n').split('\n');
    const prefixes = [];
    strings.forEach((s, i) => {
        const ours = answers[i] === 'M';
        checked++;
        if (ours !== js.test(s)) {
            fail({ regex: re, string: s, ours: answers[i], regexp: js.test(s) });
        }
        if (ours) {
            const b = Buffer.from(s, 'utf8');
            for (let k = 0; k < b.length; k++) {
                prefixes.push(b.subarray(0, k).toString('hex'));
            }
        }
    });
    for (const h of samples) {
        if (!js.test(Buffer.from(h, 'hex').toString('utf8'))) {
            fail({ regex: re, sample: h, why: 'a sample RegExp rejects' });
        }
    }
    if (prefixes.length > 0) {
        const pa = cli(bin, ['--regex', re, '--match'],
                       prefixes.join('\n') + '\n').split('\n');
        prefixes.forEach((p, i) => {
            checked++;
            if (pa[i] !== 'P' && pa[i] !== 'M') {
                fail({ regex: re, prefix: p, ours: pa[i] });
            }
        });
    }
}

function schemaProp(bin, dir, entry, index) {
    const file = `${dir}/schema-${index}.json`;
    const validate = ajv.compile(entry.schema);
    const lines = cli(bin, ['--schema', file, '--sample', '40', '--max-len',
                            '2000', '--seed', String(index)]).split('\n')
        .filter((l) => l.length > 0);
    if (lines.length < 5) {
        fail({ schema: entry.name, why: `only ${lines.length} samples` });
    }
    for (const h of lines) {
        const text = Buffer.from(h, 'hex').toString('utf8');
        checked++;
        let v;
        try {
            v = JSON.parse(text);
        } catch (e) {
            fail({ schema: entry.name, text, why: 'not JSON' });
            continue;
        }
        if (!validate(v)) {
            fail({ schema: entry.name, text, errors: validate.errors });
        }
    }
}

const [mode, ...args] = process.argv.slice(2);

if (mode === 'prop') {
    const [bin, fixtures, tmp] = args;
    const regexes = JSON.parse(readFileSync(`${fixtures}/regexes.json`));
    const schemas = JSON.parse(readFileSync(`${fixtures}/schemas.json`));
    for (const re of regexes) {
        regexProp(bin, re);
    }
    schemas.forEach((s, i) => schemaProp(bin, tmp, s, i));
} else if (mode === 'validate') {
    const items = JSON.parse(readFileSync(args[0]));
    const compiled = new Map();
    for (const it of items) {
        checked++;
        if (it.regex !== undefined) {
            if (!new RegExp(`^(?:${it.regex})$`, 'u').test(it.text)) {
                fail({ regex: it.regex, text: it.text });
            }
            continue;
        }
        const key = JSON.stringify(it.schema);
        if (!compiled.has(key)) {
            compiled.set(key, ajv.compile(it.schema));
        }
        const validate = compiled.get(key);
        let v;
        try {
            v = JSON.parse(it.text);
        } catch (e) {
            fail({ schema: it.name, text: it.text, why: 'not JSON' });
            continue;
        }
        if (!validate(v)) {
            fail({ schema: it.name, text: it.text, errors: validate.errors });
        }
    }
}

console.log(JSON.stringify({ checked, failures }));
