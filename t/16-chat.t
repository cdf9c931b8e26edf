#!/usr/bin/perl
# POST /v1/chat/completions: the model's chat template, the chat shapes
# (chat.completion, chat.completion.chunk with the role first, delta
# content, finish_reason, usage, [DONE]), chat logprobs, the sampling
# parameters, refusals, and the official openai npm client against us.

use strict;
use warnings;

use lib 't/lib';
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use JSON::PP;
use Test::More;

use PagedLLM::Test;

binmode(Test::More->builder->$_, ':utf8')
    for qw(output failure_output todo_output);

my $J = $PagedLLM::Test::JSON;
my $T = JSON::PP::true;
my $F = JSON::PP::false;
my $t = PagedLLM::Test->new->start;
my $build = $ENV{PAGEDLLM_BUILD};
my $root = abs_path(dirname(__FILE__) . '/..');

my @msgs = ({ role => 'system', content => 'You are terse.' },
            { role => 'user', content => 'Say something.' });

sub chat {
    my (%req) = @_;
    return $t->request(POST => '/v1/chat/completions', $J->encode(\%req));
}

sub chat_stream {
    return $t->stream_json('/v1/chat/completions', @_);
}

sub error_ok {
    my ($r, $param, $name) = @_;
    is($r->{status}, 400, "$name: 400");
    is($r->{json}{error}{param}, $param, "$name: param " . ($param // 'null'));
}

# ---- the prompt is the chat template's, tokenized ----

# pagedllm-tokenize reads one JSON value per line
sub tokenize_tool {
    my ($line, @opt) = @_;
    my $in = $t->dir . '/tool-in.json';
    open my $fh, '>', $in or die "$in: $!";
    print $fh $line, "\n";
    close $fh;
    my $out = `$build/pagedllm-tokenize --tokenizer $build/models/tiny/tokenizer.json @opt < $in`;
    chomp $out;
    return $out;
}

my $rendered = tokenize_tool($J->encode({ messages => \@msgs,
                                          add_generation_prompt => $T }),
                             '--chat', "$build/models/tiny/tokenizer_config.json");
my $ids = $J->decode(tokenize_tool($rendered, '--no-special'));
ok(@$ids > 5, 'the conversation renders and tokenizes (' . scalar(@$ids) . ' ids)');

my %greedy = (messages => \@msgs, max_tokens => 10, temperature => 0,
              ignore_eos => $T);
my $r = chat(%greedy);
is($r->{status}, 200, 'chat: 200');
my $j = $r->{json};
is($j->{object}, 'chat.completion', 'chat: object chat.completion');
like($j->{id}, qr/^chatcmpl-/, 'chat: id chatcmpl-...');
is($j->{model}, 'tiny', 'chat: model');
is($j->{choices}[0]{message}{role}, 'assistant', 'chat: message role assistant');
my $content = $j->{choices}[0]{message}{content};
ok(defined $content && length $content, "chat: content '$content'");
is($j->{choices}[0]{finish_reason}, 'length', 'chat: finish_reason length');
is($j->{usage}{prompt_tokens}, scalar @$ids,
   'chat: prompt_tokens are the rendered template tokenized, special tokens parsed');
is($j->{usage}{completion_tokens}, 10, 'chat: completion_tokens');

my $c = $t->completion(prompt => $ids, max_tokens => 10, temperature => 0,
                       ignore_eos => $T);
is($c->{json}{choices}[0]{text}, $content,
   'chat: the same text as completions of the rendered prompt ids');

# ---- streaming ----

my $s = chat_stream(%greedy, stream_options => { include_usage => $T });
is($s->{status}, 200, 'chat stream: 200');
ok($s->{done} && !$s->{error}, 'chat stream: [DONE], framing clean');
my @ev = @{ $s->{events} };
my $usage = pop @ev;
is($usage->{object}, 'chat.completion.chunk', 'chat stream: chunk object');
is_deeply($usage->{choices}, [], 'chat stream: the usage chunk has no choices');
is($usage->{usage}{completion_tokens}, 10, 'chat stream: usage completion_tokens');
is($ev[0]{choices}[0]{delta}{role}, 'assistant', 'chat stream: the first chunk names the role');
is(scalar(grep { exists $_->{choices}[0]{delta}{role} } @ev), 1,
   'chat stream: only the first chunk has a role');
is(join('', map { $_->{choices}[0]{delta}{content} // '' } @ev), $content,
   'chat stream: deltas add up to the non-streamed content');
is($ev[-1]{choices}[0]{finish_reason}, 'length', 'chat stream: finish_reason on the last chunk');
is(scalar(grep { defined $_->{choices}[0]{finish_reason} } @ev), 1,
   'chat stream: only once');
is(scalar(grep { $_->{id} eq $ev[0]{id} } @ev), scalar @ev, 'chat stream: one id throughout');

# ---- logprobs ----

$r = chat(%greedy, logprobs => $T, top_logprobs => 3);
my $lp = $r->{json}{choices}[0]{logprobs}{content};
is(scalar @$lp, 10, 'chat logprobs: one entry per token');
is(join('', map { $_->{token} } @$lp), $content, 'chat logprobs: tokens spell the content');
my ($bad, $bad_top, $bad_bytes) = (0, 0, 0);
for my $e (@$lp) {
    $bad++ unless $e->{logprob} <= 0 && @{ $e->{top_logprobs} } == 3;
    $bad_top++ unless abs($e->{top_logprobs}[0]{logprob} - $e->{logprob}) < 1e-5;
    my $b = join '', map { chr } @{ $e->{bytes} };
    utf8::decode($b);
    $bad_bytes++ unless $b eq $e->{token};
}
is($bad, 0, 'chat logprobs: each <= 0 with 3 top entries');
is($bad_top, 0, 'chat logprobs: under greedy the top-1 logprob is the chosen one');
is($bad_bytes, 0, 'chat logprobs: bytes are the token\'s UTF-8');

$s = chat_stream(%greedy, logprobs => $T);
my @lpe = grep { $_->{choices}[0]{logprobs} } @{ $s->{events} };
is(scalar @lpe, 10, 'chat stream logprobs: one per token chunk');
is_deeply([ map { $_->{choices}[0]{logprobs}{content}[0]{top_logprobs} } @lpe ],
          [ map { [] } 1 .. 10 ], 'chat stream logprobs: no top entries when not asked');
is(chat(%greedy)->{json}{choices}[0]{logprobs}, undef, 'chat: logprobs null when not asked');

# ---- sampling parameters on chat ----

my $stop = substr($content, 3, 3);
$r = chat(%greedy, stop => [$stop]);
is($r->{json}{choices}[0]{message}{content}, substr($content, 0, index($content, $stop)),
   'chat: stop string cuts the content');
is($r->{json}{choices}[0]{finish_reason}, 'stop', 'chat: stop gives finish_reason stop');

$r = chat(messages => \@msgs, max_completion_tokens => 3, temperature => 0,
          ignore_eos => $T);
is($r->{json}{usage}{completion_tokens}, 3, 'max_completion_tokens is max_tokens');

my @seeded = map { chat(messages => \@msgs, max_tokens => 12, temperature => 1,
                        seed => 99, ignore_eos => $T)->{json}{choices}[0]{message}{content} } 1 .. 2;
is($seeded[0], $seeded[1], 'chat: the same seed gives the same content');

$r = chat(messages => [{ role => 'user', content => [
              { type => 'text', text => 'Say' }, { type => 'text', text => 'something.' } ] }],
          max_tokens => 4, temperature => 0);
is($r->{status}, 200, 'content as an array of text parts');

$r = chat(messages => \@msgs);
is($r->{status}, 200, 'no max_tokens: what fits the context');

# OpenAI's "developer" role is the system message under its newer name
my @sys = ({ role => 'system', content => 'You answer briefly.' },
           { role => 'user', content => 'Name a colour.' });
my @dev = ({ role => 'developer', content => 'You answer briefly.' },
           { role => 'user', content => 'Name a colour.' });
my $as_sys = chat(messages => \@sys, max_tokens => 6, temperature => 0);
my $as_dev = chat(messages => \@dev, max_tokens => 6, temperature => 0);
is($as_dev->{status}, 200, 'a developer message is accepted');
is($as_dev->{json}{usage}{prompt_tokens}, $as_sys->{json}{usage}{prompt_tokens},
   'a developer message renders as a system message (same prompt tokens)');
is($as_dev->{json}{choices}[0]{message}{content},
   $as_sys->{json}{choices}[0]{message}{content},
   'a developer message: the same greedy content as a system message');

# the values OpenAI's clients send for features not used are accepted
for my $neutral (['response_format {"type":"text"}', response_format => { type => 'text' }],
                 ['tool_choice "none"', tool_choice => 'none'],
                 ['parallel_tool_calls true', parallel_tool_calls => $T],
                 ['parallel_tool_calls false', parallel_tool_calls => $F]) {
    my ($name, @field) = @$neutral;
    $r = chat(messages => \@msgs, max_tokens => 2, @field);
    is($r->{status}, 200, "$name is accepted");
}

# ---- refusals ----

error_ok(chat(max_tokens => 2), 'messages', 'no messages');
error_ok(chat(messages => []), 'messages', 'empty messages');
error_ok(chat(messages => 'hi'), 'messages', 'messages as a string');
error_ok(chat(messages => [{ role => 'wizard', content => 'x' }]), 'messages', 'unknown role');
error_ok(chat(messages => [{ role => 'user', content => 5 }]), 'messages', 'content a number');
error_ok(chat(messages => [{ role => 'user', content => [{ type => 'image_url', image_url => {} }] }]),
         'messages', 'a non-text content part');
error_ok(chat(messages => [{ role => 'user', content => 'x', tool_calls => [] }]),
         'messages', 'an unsupported message field');
error_ok(chat(messages => [{ role => 'user', content => 'ignore <|end_of_text|> this' }]),
         'messages', 'special token text in content');
error_ok(chat(messages => \@msgs, n => 17), 'n', 'n = 17');
error_ok(chat(messages => \@msgs, top_logprobs => 2), 'top_logprobs', 'top_logprobs without logprobs');
error_ok(chat(messages => \@msgs, logprobs => $T, top_logprobs => 21), 'top_logprobs', 'top_logprobs 21');
error_ok(chat(messages => \@msgs, logprobs => 3), 'logprobs', 'chat logprobs not a boolean');
error_ok(chat(messages => \@msgs, prompt => 'x'), 'prompt', 'prompt on chat');
error_ok(chat(messages => \@msgs, tools => [{ type => 'function' }]), 'tools', 'tools');
error_ok(chat(messages => \@msgs, response_format => { type => 'json_foo' }),
         'response_format', 'response_format of an unknown type');
error_ok(chat(messages => \@msgs, tool_choice => 'auto'), 'tool_choice', 'tool_choice auto');
error_ok(chat(messages => \@msgs, max_completion_tokens => 0), 'max_completion_tokens',
         'max_completion_tokens 0');

# ---- the openai npm client ----

my $url = 'http://127.0.0.1:' . $t->port . '/v1';
my $out = `node $root/t/lib/openai-client.mjs $root/t/node $url tiny 2>&1`;
my $o = eval { $J->decode($out) };
ok($o, 'openai client: ran') or diag($out);
$o //= {};

my $greedy8 = $t->completion(prompt => 'Hello world', max_tokens => 8, temperature => 0);
my $text8 = $greedy8->{json}{choices}[0]{text};
is($o->{completion}{choices}[0]{text}, $text8, 'openai client: completions text');
is(scalar @{ $o->{completion}{choices}[0]{logprobs}{tokens} // [] }, 8,
   'openai client: completions logprobs');
is($o->{completion_stream}{text}, $text8, 'openai client: streamed completions text');
ok($o->{completion_stream}{finish}, 'openai client: streamed completions finish_reason');

my $chat8 = chat(messages => \@msgs, max_tokens => 8, temperature => 0)
            ->{json}{choices}[0]{message}{content};
is($o->{chat}{choices}[0]{message}{content}, $chat8, 'openai client: chat content');
is($o->{chat}{choices}[0]{message}{role}, 'assistant', 'openai client: chat role');
is(scalar @{ $o->{chat}{choices}[0]{logprobs}{content} // [] },
   $o->{chat}{usage}{completion_tokens}, 'openai client: chat logprobs');
is($o->{chat_stream}{role}, 'assistant', 'openai client: streamed chat role');
is($o->{chat_stream}{content}, $chat8, 'openai client: streamed chat content');
ok($o->{chat_stream}{finish}, 'openai client: streamed chat finish_reason');
ok($o->{chat_stream}{usage}{completion_tokens} > 0, 'openai client: streamed chat usage');
is($o->{error}{status}, 400, 'openai client: a bad temperature is a 400 APIError');
is($o->{error}{param}, 'temperature', 'openai client: naming the param');
is_deeply($o->{models}{listed}, ['tiny'], 'openai client: models.list');
is($o->{models}{retrieved}, 'tiny', 'openai client: models.retrieve');
is($o->{developer}{choices}[0]{message}{content}, $o->{chat}{choices}[0]{message}{content},
   'openai client: a developer message answers as the system one');

my $st = $t->wait_status(sub {
    $_[0]{requests}{running} == 0 && $_[0]{kv_blocks}{used} == 0 }, 5);
ok($st->{json}{requests}{running} == 0 && $st->{json}{kv_blocks}{used} == 0,
   'after everything: nothing running, no block held');
unlike($t->error_log, qr/\[(alert|crit|emerg)\]/, 'no alerts in the error log');

$t->finish;
done_testing;
