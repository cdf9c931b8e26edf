#!/usr/bin/perl
# What clients of OpenAI and vLLM send, and what they expect back, each
# checked by the status, the body's fields and the token counts:
# - max_completion_tokens is the limit whenever it is given, whatever the
#   order of the keys, and each of the two is checked;
# - an assistant message carrying the fields of OpenAI's answers (refusal,
#   audio, function_call, annotations, parsed) or vLLM's reasoning comes
#   back in the history, as the official openai client sends it;
# - stream_options takes OpenAI's include_obfuscation and vLLM's
#   continuous_usage_stats;
# - a prompt over the context is context_length_exceeded, wherever it is;
# - refusals say what is wrong in the client's terms and name the field;
# - an engine that fails a stream gives the same string code as it gives
#   a whole answer.

use strict;
use warnings;

use lib 't/lib';
use Cwd qw(abs_path);
use File::Copy qw(copy);
use File::Temp qw(tempdir);
use JSON::PP;
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $T = JSON::PP::true;
my $root = $ENV{PAGEDLLM_ROOT} // '.';
my $tiny = "$ENV{PAGEDLLM_BUILD}/models/tiny";

sub slurp { local $/; open my $f, '<:raw', $_[0] or die "$_[0]: $!"; <$f> }

sub spew {
    open my $f, '>:raw', $_[0] or die "$_[0]: $!\n";
    print $f $_[1];
    close $f;
}

# the tiny model with a chat template that writes an assistant's
# reasoning_content and reasoning where they are given
sub model_reading_reasoning {
    my $dir = tempdir('pagedllm-compat-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    for my $f (qw(config.json generation_config.json model.safetensors)) {
        symlink("$tiny/$f", "$dir/$f") or die "symlink $f: $!\n";
    }
    # the engine names its tokenizer by its real path, beside which the
    # chat template is read
    copy("$tiny/tokenizer.json", $dir) or die "tokenizer.json: $!\n";
    my $conf = $J->decode(slurp("$tiny/tokenizer_config.json"));
    $conf->{chat_template} =
        "{%- for m in messages %}<{{ m.role }}>"
        . "{%- if m.reasoning_content is defined %}"
        . "[think:{{ m.reasoning_content }}]{%- endif %}"
        . "{%- if m.reasoning is defined %}"
        . "[reasoning:{{ m.reasoning }}]{%- endif %}"
        . "{{ m.content }}\n{%- endfor %}"
        . "{%- if add_generation_prompt %}<assistant>{%- endif %}";
    spew("$dir/tokenizer_config.json", $J->encode($conf));
    return $dir;
}

my $t = PagedLLM::Test->new(server => '
        location /quick/ {
            pagedllm;
            pagedllm_timeout 1s;
        }
')->start;

my $ctx = $t->request(GET => '/v1/models')->{json}{data}[0]{max_model_len};
ok($ctx > 0, "the model's context: $ctx");

sub chat_raw { $t->request(POST => '/v1/chat/completions', $_[0]) }

sub refused_ok {
    my ($r, $param, $like, $name) = @_;
    my $e = ($r->{json} // {})->{error} // {};
    ok($r->{status} == 400 && ($e->{param} // '') eq $param
       && ($e->{message} // '') =~ $like,
       "$name: 400 naming $param")
        or diag("$r->{status}: $r->{body}");
}

# ---- max_tokens and max_completion_tokens -----------------------------------

my $user = '"messages":[{"role":"user","content":"Count."}],"ignore_eos":true';

for my $order ('"max_completion_tokens":3,"max_tokens":5',
               '"max_tokens":5,"max_completion_tokens":3')
{
    my $r = chat_raw("{$user,$order}");
    is($r->{json}{usage}{completion_tokens}, 3,
       "{$order}: max_completion_tokens is the limit")
        or diag($r->{body});
}

my $r = chat_raw("{$user,\"max_completion_tokens\":null,\"max_tokens\":4}");
is($r->{json}{usage}{completion_tokens}, 4,
   'max_completion_tokens null: max_tokens is the limit');
$r = chat_raw("{$user,\"max_tokens\":4}");
is($r->{json}{usage}{completion_tokens}, 4, 'max_tokens alone on chat');

refused_ok(chat_raw("{$user,\"max_completion_tokens\":3,\"max_tokens\":0}"),
           'max_tokens', qr/'max_tokens' must be an integer from 1/,
           'max_tokens 0 beside a good max_completion_tokens');
refused_ok(chat_raw("{$user,\"max_tokens\":3,\"max_completion_tokens\":2.5}"),
           'max_completion_tokens', qr/must be an integer/,
           'max_completion_tokens 2.5 beside a good max_tokens');
refused_ok(chat_raw("{$user,\"max_tokens\":\"3\","
                    . "\"max_completion_tokens\":3}"),
           'max_tokens', qr/must be an integer/,
           'max_tokens a string beside max_completion_tokens');

# ---- an assistant's turn sent back as OpenAI's answers carry it ------------

sub tokens_of {
    my (@msgs) = @_;
    my $r = $t->request(POST => '/v1/tokenize',
                        $J->encode({ messages => \@msgs }));
    return $r->{status} == 200 ? $r->{json}{tokens} : $r->{body};
}

my %q = (role => 'user', content => 'Why?');
my $said = tokens_of(\%q, { role => 'assistant', content => 'Because.' }, \%q);
ok(ref $said eq 'ARRAY', 'a plain conversation tokenizes') or diag($said);

for my $f ([ refusal => undef ], [ audio => undef ],
           [ function_call => undef ],
           [ annotations => undef ], [ annotations => [] ],
           [ parsed => undef ], [ parsed => { because => 1 } ],
           [ reasoning_content => undef ], [ reasoning => undef ])
{
    my $what = $J->encode({ $f->[0] => $f->[1] });
    is_deeply(tokens_of(\%q, { role => 'assistant', content => 'Because.',
                               $f->[0] => $f->[1] }, \%q),
              $said, "assistant $what: accepted, the prompt unchanged");
}

# as the node SDK's finalChatCompletion() gives the message, tool_calls
# included
my $sdk = $J->decode('{"role":"assistant","content":"Because.",'
    . '"refusal":null,"parsed":null,"audio":null,"function_call":null,'
    . '"annotations":[],"tool_calls":[],"reasoning_content":null}');
is_deeply(tokens_of(\%q, $sdk, \%q), $said,
          'every null field at once, tool_calls [] too: the prompt unchanged');

is_deeply(tokens_of(\%q, { role => 'assistant', content => undef,
                           refusal => 'Because.' }, \%q),
          $said, 'a refusal with content null stands for the content');
is_deeply(tokens_of(\%q, { role => 'assistant', refusal => 'Because.' }, \%q),
          $said, 'a refusal without content stands for the content');
is_deeply(tokens_of(\%q, { role => 'assistant', content => 'Because.',
                           refusal => 'I will not.' }, \%q),
          $said, 'a refusal beside content: the content is what was said');
is_deeply(tokens_of(\%q, { role => 'assistant', content => undef,
                           refusal => 'Because.', tool_calls => undef }, \%q),
          $said, 'a refusal on a message with tool_calls null');
is_deeply(tokens_of(\%q, { role => 'assistant', content => 'Because.',
                           reasoning_content => 'Think.' }, \%q),
          $said, 'reasoning_content: not in a template that does not read it');

$r = chat_raw($J->encode({ max_tokens => 2, messages => [
    \%q, { role => 'assistant', content => 'Because.', refusal => undef,
           parsed => undef, annotations => [] }, \%q ] }));
is($r->{status}, 200, 'a chat completion after such a turn: 200')
    or diag($r->{body});

my @bad = (
    [ { audio => { id => 'audio_1' } }, qr/'audio' is not supported/ ],
    [ { function_call => { name => 'f', arguments => '{}' } },
      qr/'function_call' is not supported.*tool_calls/ ],
    [ { annotations => [{ type => 'url_citation' }] },
      qr/'annotations' is not supported/ ],
    [ { refusal => 1 }, qr/'refusal' must be a string or null/ ],
    [ { refusal => ['no'] }, qr/'refusal' must be a string or null/ ],
    [ { reasoning_content => {} },
      qr/'reasoning_content' must be a string or null/ ],
    [ { reasoning => 0 }, qr/'reasoning' must be a string or null/ ],
    [ { reasoning_content => 'x<|end_of_text|>' },
      qr/special token text "<\|end_of_text\|>"/ ],
    [ { reasoning => "a\x{0}b" }, qr/U\+0000/ ],
);
for my $b (@bad) {
    my ($f, $like) = @$b;
    refused_ok(chat_raw($J->encode({ max_tokens => 1, messages => [
        \%q, { role => 'assistant', content => 'Because.', %$f }, \%q ] })),
        'messages', $like, 'assistant ' . $J->encode($f));
    refused_ok(chat_raw($J->encode({ max_tokens => 1, messages => [
        \%q, { role => 'assistant', content => undef, tool_calls => [],
               %$f }, \%q ] })),
        'messages', $like, 'assistant with tool_calls, ' . $J->encode($f));
}
refused_ok(chat_raw($J->encode({ max_tokens => 1, messages => [
    { %q, refusal => undef } ] })), 'messages',
    qr/message field 'refusal' is not supported/,
    'refusal on a user message');
refused_ok(chat_raw($J->encode({ max_tokens => 1, messages => [
    \%q, { role => 'tool', tool_call_id => 'c', content => 'x',
           parsed => undef } ] })), 'messages',
    qr/message field 'parsed' is not supported in a tool message/,
    'parsed on a tool message');

# the official openai client: a streamed answer's final message, and a
# parsed one's, sent back as the next turn's history
my $node = abs_path("$root/t/node");
my $js = "$t->{dir}/history.mjs";
spew($js, <<'EOF_JS');
import { createRequire } from 'module';

const [nodeDir, baseURL, model] = process.argv.slice(2);
const require = createRequire(`${nodeDir}/package.json`);
const OpenAI = require('openai');
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0 });
const out = {};

// the answer held to one choice, so that it ends with its stop (parse()
// refuses an answer cut by the length limit)
const ask = { role: 'user', content: 'Say something.' };
const req = { model, max_completion_tokens: 8, temperature: 0,
              guided_choice: ['Sure.'] };

async function again(messages, name) {
    try {
        const r = await client.chat.completions.create({ ...req, messages });
        out[name] = { status: 200, finish: r.choices[0].finish_reason };
    } catch (e) {
        out[name] = { status: e.status, message: e.message };
    }
}

const streamed = await client.chat.completions.stream({
    ...req, messages: [ask],
}).finalChatCompletion();
out.streamed = streamed.choices[0].message;
await again([ask, streamed.choices[0].message, ask], 'after_stream');

const parsed = await client.chat.completions.parse({
    ...req, messages: [ask],
});
out.parsed = parsed.choices[0].message;
await again([ask, parsed.choices[0].message, ask], 'after_parse');

console.log(JSON.stringify(out));
EOF_JS
my $url = 'http://127.0.0.1:' . $t->port . '/v1';
my $out = `node $js $node $url tiny 2>&1`;
my $o = eval { $J->decode($out) } // {};
ok(exists $o->{streamed}{refusal} && exists $o->{parsed}{parsed},
   "the node client's messages carry its own fields: "
   . join(',', sort keys %{ $o->{streamed} // {} })) or diag($out);
is($o->{after_stream}{status}, 200,
   "finalChatCompletion()'s message sent back: 200")
    or diag($J->encode($o->{after_stream} // {}));
is($o->{after_parse}{status}, 200, "parse()'s message sent back: 200")
    or diag($J->encode($o->{after_parse} // {}));

# a template that reads the reasoning gets it under both names
{
    my $rt = PagedLLM::Test->new(model => model_reading_reasoning())->start;
    for my $name (qw(reasoning_content reasoning)) {
        my $r = $rt->request(POST => '/v1/tokenize', $J->encode({ messages => [
            \%q, { role => 'assistant', content => 'Because.',
                   $name => 'Think.' } ], add_generation_prompt =>
            JSON::PP::false }));
        my $text = $rt->request(POST => '/v1/detokenize', $J->encode({
            tokens => $r->{json}{tokens} // [] }))->{json}{prompt} // '';
        like($text,
             qr/<assistant>\[think:Think\.\]\[reasoning:Think\.\]Because\./,
             "$name: the template reads it as reasoning_content and "
             . 'reasoning') or diag($r->{body});
    }
    $rt->finish;
}

# ---- stream_options ---------------------------------------------------------

sub chat_stream {
    my (%req) = @_;
    return $t->stream_json('/v1/chat/completions', max_tokens => 4,
        ignore_eos => $T, messages => [\%q], %req);
}

for my $v (JSON::PP::false, $T) {
    my $s = chat_stream(stream_options => { include_usage => $T,
                                            include_obfuscation => $v });
    my @ev = @{ $s->{events} };
    ok($s->{status} == 200 && $s->{done} && @ev
       && !grep({ exists $_->{obfuscation} } @ev)
       && $ev[-1]{usage}{completion_tokens} == 4,
       "include_obfuscation $v: accepted, nothing padded, the usage last")
        or diag($J->encode($s));
}

for my $co ({ continuous_usage_stats => $T },
            { continuous_usage_stats => $T, include_usage => $T })
{
    my $s = chat_stream(stream_options => $co, n => 2);
    my @ev = @{ $s->{events} };
    my $last = pop(@ev) // {};
    my ($ok, $prev) = (1, 0);
    for my $e (@ev) {
        my $u = $e->{usage};
        $ok &&= ref $u eq 'HASH'
                && $u->{prompt_tokens} == $last->{usage}{prompt_tokens}
                && $u->{total_tokens}
                   == $u->{prompt_tokens} + $u->{completion_tokens}
                && $u->{completion_tokens} >= $prev
                && $u->{completion_tokens} <= 8;
        $prev = $u->{completion_tokens} if ref $u eq 'HASH';
    }
    my $what = $J->encode($co);
    ok($s->{done} && @ev >= 3 && $ok,
       "$what: every chunk carries the usage so far")
        or diag($J->encode($s));
    ok(@{ $last->{choices} // [1] } == 0
       && $last->{usage}{completion_tokens} == 8
       && $prev == 8, "$what: the last chunk the totals, which the chunks "
       . 'before reached') or diag($J->encode($last));
}

my $s = chat_stream(stream_options => { continuous_usage_stats => $T,
                                        include_usage => JSON::PP::false });
ok($s->{done} && !grep({ exists $_->{usage} } @{ $s->{events} }),
   'continuous_usage_stats with include_usage false: no usage at all')
    or diag($J->encode($s));

$s = $t->stream_json('/v1/completions', prompt => 'Count', max_tokens => 3,
                     ignore_eos => $T,
                     stream_options => { continuous_usage_stats => $T });
ok($s->{done} && $s->{events}[-2]{usage}{completion_tokens} == 3,
   'continuous_usage_stats on completions') or diag($J->encode($s));

for my $bad ([ { include_obfuscation => 'no' },
               qr/include_obfuscation' must be a boolean/ ],
             [ { continuous_usage_stats => 1 },
               qr/continuous_usage_stats' must be a boolean/ ],
             [ { include_usage => 'yes' },
               qr/include_usage' must be a boolean/ ],
             [ { include_timing => $T },
               qr/Unrecognized stream option: include_timing/ ])
{
    my $r = chat_raw($J->encode({ messages => [\%q], max_tokens => 1,
                                  stream => $T,
                                  stream_options => $bad->[0] }));
    refused_ok($r, 'stream_options', $bad->[1],
               'stream_options ' . $J->encode($bad->[0]));
}
refused_ok(chat_raw($J->encode({ messages => [\%q], max_tokens => 1,
                                 stream_options => {
                                     include_obfuscation => $T } })),
           'stream_options', qr/only allowed when 'stream' is true/,
           'stream_options without stream');

# ---- a prompt over the context ----------------------------------------------

sub too_long_ok {
    my ($r, $param, $like, $name) = @_;
    my $e = ($r->{json} // {})->{error} // {};
    ok($r->{status} == 400 && ($e->{code} // '') eq 'context_length_exceeded'
       && ($e->{param} // '') eq $param && ($e->{message} // '') =~ $like,
       "$name: context_length_exceeded, param $param")
        or diag("$r->{status}: $r->{body}");
}

my $long = 'word ' x $ctx;
my $left = $ctx - 1;
too_long_ok($t->completion(prompt => $long, max_tokens => 1), 'prompt',
            qr/length is $ctx tokens, however your prompt has \d+ tokens/,
            'completions: the prompt alone');
too_long_ok(chat_raw($J->encode({ messages => [{ role => 'user',
                                                 content => $long }] })),
            'messages', qr/however your prompt has \d+ tokens/,
            'chat: the conversation alone');
too_long_ok($t->completion(prompt => 'Hi', max_tokens => $left),
            'max_tokens',
            qr/requested \d+ tokens \(\d+ in the prompt, $left for the /,
            'completions: prompt and max_tokens');
too_long_ok(chat_raw($J->encode({ messages => [\%q],
                                  max_completion_tokens => $ctx })),
            'max_completion_tokens', qr/for the completion/,
            'chat: prompt and max_completion_tokens');
too_long_ok($t->completion(prompt => ['Hi', 'There', $long], max_tokens => 1),
            'prompt', qr/however prompt 2 has \d+ tokens/,
            'a batch: the prompt at index 2 alone');
my $hi = scalar @{ $t->token_ids('Hi') };
too_long_ok($t->completion(prompt => ['Hi', 'There there there'],
                           max_tokens => $ctx - $hi),
            'max_tokens',
            qr/\(\d+ in prompt 1, ${\($ctx - $hi)} for the completion\)/,
            'a batch: prompt 0 fits with max_tokens, prompt 1 does not');

# ---- refusals that say what is wrong ----------------------------------------

$r = $t->completion(prompt => 'x', top_p => 1e-300);
refused_ok($r, 'top_p', qr/got 1e-300\b/, 'top_p 1e-300');
like($r->{json}{error}{message} // '', qr/0 in the single precision/,
     'top_p 1e-300: the message says it is 0 as the sampler takes it');
refused_ok($t->completion(prompt => 'x', top_p => 0), 'top_p',
           qr/must be in \(0\.0, 1\.0\], got 0$/, 'top_p 0');

my %beam = (prompt => 'x', max_tokens => 2, use_beam_search => $T,
            best_of => 2);
for my $f ([ logprobs => 1 ], [ prompt_logprobs => 1 ], [ min_p => 0.1 ],
           [ presence_penalty => 0.5 ], [ frequency_penalty => 0.5 ],
           [ repetition_penalty => 1.2 ], [ logit_bias => { 5 => 1 } ],
           [ guided_regex => 'a+' ])
{
    refused_ok($t->completion(%beam, @$f), $f->[0],
               qr/^\Q$f->[0]\E is not supported with beam search/,
               "beam search with $f->[0]");
}
refused_ok(chat_raw($J->encode({ messages => [\%q], max_tokens => 2, n => 2,
                                 use_beam_search => $T, logprobs => $T })),
           'logprobs', qr/logprobs is not supported with beam search/,
           'chat beam search with logprobs');

$r = $t->completion(prompt => 'x', guided_regex => 'a{100000}');
refused_ok($r, 'guided_regex', qr/above 1000/, 'a{100000}');
my $offsets = () = ($r->{json}{error}{message} // '') =~ /at offset/g;
is($offsets, 1, 'a{100000}: one offset, in the regex')
    or diag($r->{body});
like($r->{json}{error}{message} // '',
     qr{^in the regex /a\{100000\}/: .* at offset 7$},
     'a{100000}: the regex named, the offset in it');

for my $g ([ guided_json => { const => "a\x{0}b" } ],
           [ guided_json => '{"const":"a\\u0000b"}' ],
           [ response_format => { type => 'json_schema', json_schema => {
                 name => 'n', schema => { enum => ["\x{0}"] } } } ])
{
    $r = $t->completion(prompt => 'x', @$g);
    refused_ok($r, $g->[0],
               qr/NUL character \(U\+0000\) is not supported in a schema/,
               "$g->[0] with U+0000 "
               . (ref $g->[1] ? 'as an object' : 'as text'));
    unlike($r->{body}, qr/JSON_ALLOW_NUL/, '... and quotes no parser flag');
}

$r = $t->request(POST => '/v1/completions',
                 '{"prompt":"x","model":"tiny\u0000xyz"}');
is($r->{status}, 404, 'a model name with U+0000: 404');
is($r->{json}{error}{message}, 'The model `tiny\u0000xyz` does not exist',
   'a model name with U+0000: shown whole, the NUL escaped');
$r = $t->request(POST => '/v1/completions',
                 '{"prompt":"x","model":"ti\"ny\n"}');
is($r->{json}{error}{message}, 'The model `ti\"ny\n` does not exist',
   'a model name with a quote and a newline: shown as JSON writes them');

$r = $t->request(POST => '/v1/completions',
                 '{"prompt":' . ('[' x 100000) . (']' x 100000) . '}');
is($r->{status}, 400, 'a body nested 100,000 deep: 400');
like($r->{json}{error}{message} // '', qr/nest deeper than the 2048 levels/,
     'a body nested 100,000 deep: the message says the nesting is too deep');

# ---- the code of an engine's failure, streamed or not -----------------------

sub long_body {
    my (%f) = @_;
    return $J->encode({ prompt => 'long', max_tokens => 1500,
                        ignore_eos => $T, %f });
}

# A stream that has begun and a whole answer in flight under $path when
# $fail->() happens: the whole answer, and the stream's error event with
# the event after it.
sub failed_under {
    my ($path, $fail) = @_;
    $t->wait_status(sub { $_[0]{requests}{running} == 0 }, 10);
    my $stream = $t->stream_start($path, long_body(stream => $T));
    my $c = PagedLLM::Test::read_chunks([$stream], time + 30, 2)->[0];
    ok(@{ $c->{chunks} } >= 2, "$path: a stream runs");
    my $whole = $t->send_request(POST => $path, long_body());
    sleep 0.2;
    $fail->();
    my $rest = PagedLLM::Test::read_chunks([$stream], time + 30)->[0];
    my $w = PagedLLM::Test::read_response($whole, time + 30);
    my ($ev) = PagedLLM::Test::sse_events($rest->{chunks});
    my @data = map { $_->{data} } @$ev;
    my $e = eval { $J->decode($data[-2] // '') } // {};
    return ($w, $e->{error} // {}, $data[-1] // '');
}

sub same_code_ok {
    my ($w, $e, $after, $status, $code, $name) = @_;
    is($w->{status}, $status, "$name: a whole answer is a $status")
        or diag($w->{body});
    is($w->{json}{error}{code}, $code, "$name: its code $code");
    ok(($e->{code} // '') eq $code && $after eq '[DONE]',
       "$name: the stream's error event has the same code, a string, then "
       . '[DONE]') or diag($J->encode($e));
    is($e->{type}, 'server_error', "$name: a server_error");
}

# the engine stops answering: pagedllm_timeout 1s runs out
my ($w, $e, $after) = failed_under('/quick/v1/completions', sub {
    kill 'STOP', $t->{pids}{engine};
});
kill 'CONT', $t->{pids}{engine};
same_code_ok($w, $e, $after, 504, 'engine_timeout', 'the engine silent');

# the engine dies under a stream and a whole answer
($w, $e, $after) = failed_under('/v1/completions', sub {
    $t->stop_engine('KILL');
});
same_code_ok($w, $e, $after, 503, 'engine_unavailable', 'the engine gone');
like($e->{message} // '', qr/the engine went away/,
     'the engine gone: the event says so');

$t->finish;
done_testing;
