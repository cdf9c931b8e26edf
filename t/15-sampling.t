#!/usr/bin/perl
# Sampling parameters end to end through nginx and the engine: stop strings
# cut exactly (also across token boundaries, streamed and not), logprobs in
# OpenAI's completions shape, logit_bias, stop_token_ids, min_tokens,
# seeds, and that stopping early frees the request's blocks.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;

use PagedLLM::Test;

binmode(Test::More->builder->$_, ':utf8')
    for qw(output failure_output todo_output);

my $J = $PagedLLM::Test::JSON;
my $T = JSON::PP::true;
my $t = PagedLLM::Test->new->start;
my $EOS = 511;      # the tiny model's eos_token_id

sub stream {
    my $r = $t->stream_json('/v1/completions', @_);
    my $ev = $r->{events};
    $r->{text} = join('', map { $_->{choices}[0]{text} // '' } @$ev);
    $r->{finish} = $ev->[-1]{choices}[0]{finish_reason};
    return $r;
}

sub idle_ok {
    my ($name) = @_;
    my $st = $t->wait_status(sub {
        $_[0]{requests}{running} == 0 && $_[0]{kv_blocks}{used} == 0 }, 5);
    ok($st->{json}{requests}{running} == 0
       && $st->{json}{kv_blocks}{used} == 0,
       "$name: nothing running, no block held");
}

# ---- greedy baseline with logprobs ----

my %greedy = (prompt => 'Hello world', max_tokens => 24, temperature => 0,
              ignore_eos => $T);
my $base = $t->completion(%greedy, logprobs => 5);
is($base->{status}, 200, 'greedy with logprobs 5: 200');
my $ch = $base->{json}{choices}[0];
my $text = $ch->{text};
my $lp = $ch->{logprobs};
ok(length $text > 8, "greedy text: '$text'");

is(scalar @{ $lp->{tokens} }, 24, 'logprobs: one token per completion token');
is(join('', @{ $lp->{tokens} }), $text, 'logprobs: tokens spell the text');
is(scalar @{ $lp->{token_logprobs} }, 24, 'logprobs: token_logprobs per token');
is(scalar @{ $lp->{top_logprobs} }, 24, 'logprobs: top_logprobs per token');
is(scalar @{ $lp->{text_offset} }, 24, 'logprobs: text_offset per token');

my ($bad_lp, $bad_top, $bad_n, $bad_off, $off) = (0, 0, 0, 0, 0);
for my $i (0 .. 23) {
    my $l = $lp->{token_logprobs}[$i];
    my $top = $lp->{top_logprobs}[$i];
    my @v = sort { $b <=> $a } values %$top;
    $bad_lp++ unless $l <= 0;
    $bad_top++ unless @v && abs($v[0] - $l) < 1e-5;
    $bad_n++ unless @v >= 1 && @v <= 5;
    $bad_off++ unless $lp->{text_offset}[$i] == $off;
    $off += length $lp->{tokens}[$i];
}
is($bad_lp, 0, 'every chosen logprob is <= 0');
is($bad_top, 0, 'under greedy the chosen logprob is the top-1 logprob');
is($bad_n, 0, 'top_logprobs hold 1 to 5 entries');
is($bad_off, 0, 'text_offset counts the characters before each token');

my $s = stream(%greedy, logprobs => 2);
is($s->{text}, $text, 'streamed greedy text equals the non-streamed one');
ok($s->{done} && !$s->{error}, 'stream ends with [DONE], framing clean');
my @slp = map { $_->{choices}[0]{logprobs} } grep { @{ $_->{choices} } }
          @{ $s->{events} };
is(scalar(grep { $_ && @{ $_->{tokens} } == 1 } @slp), 24,
   'stream: every token event carries its own logprobs');
is(join('', map { $_->{tokens}[0] } @slp), $text,
   'stream: the streamed logprob tokens spell the text');
is_deeply([ map { $_->{text_offset}[0] } @slp ], $lp->{text_offset},
          'stream: text_offset runs over the whole completion');
ok(abs($slp[5]{token_logprobs}[0] - $lp->{token_logprobs}[5]) < 1e-5,
   'stream: the same logprobs as non-streamed');

my $none = $t->completion(%greedy);
is($none->{json}{choices}[0]{logprobs}, undef, 'no logprobs asked: null');
my $zero = $t->completion(%greedy, logprobs => 0);
is_deeply($zero->{json}{choices}[0]{logprobs}{top_logprobs}[0], {},
          'logprobs 0: the chosen token only, empty top_logprobs');

# ---- stop strings ----

# a stop string across a token boundary: the tail of token 3 and the head
# of token 4 (whole tokens when they are short)
my @tok = @{ $lp->{tokens} };
my ($a, $b) = ($tok[3], $tok[4]);
my $stop = (length $a > 1 ? substr($a, -2) : $a)
         . (length $b > 1 ? substr($b, 0, 2) : $b);
my $at = index($text, $stop);
ok($at >= 0, "stop string '$stop' spans tokens 3 and 4");
my $want = substr($text, 0, $at);

my $r = $t->completion(%greedy, stop => [$stop]);
is($r->{json}{choices}[0]{text}, $want, 'stop: text cut right before the stop string');
is($r->{json}{choices}[0]{finish_reason}, 'stop', 'stop: finish_reason stop');
ok($r->{json}{usage}{completion_tokens} < 24, 'stop: generation ended early');
idle_ok('stop string (non-streamed)');

$s = stream(%greedy, stop => $stop);
is($s->{text}, $want, 'stop, streamed: the same cut');
is($s->{finish}, 'stop', 'stop, streamed: finish_reason stop on the last event');
ok($s->{done} && !$s->{error}, 'stop, streamed: [DONE], framing clean');
my $leak = grep { index($_->{choices}[0]{text} // '', $stop) >= 0 } @{ $s->{events} };
is($leak, 0, 'stop, streamed: no event carries the stop string');
idle_ok('stop string (streamed)');

# the earliest of several stop strings wins
my $late = substr($text, length($text) - 3);
my $early = substr($text, 2, 2);
$r = $t->completion(%greedy, stop => [$late, $early, 'zzzzqqqq']);
is($r->{json}{choices}[0]{text}, substr($text, 0, index($text, $early)),
   'several stop strings: cut at the earliest match');

$r = $t->completion(%greedy, stop => ['zzzzqqqq']);
is($r->{json}{choices}[0]{text}, $text, 'a stop string that never occurs changes nothing');
is($r->{json}{choices}[0]{finish_reason}, 'length', 'and finish_reason stays length');

$s = stream(%greedy, stop => ['zzzzqqqq', substr($text, -1) . 'zz']);
is($s->{text}, $text, 'streamed: text held back for a possible stop string is released at the end');

# ---- logit_bias, stop_token_ids, min_tokens ----

$r = $t->completion(prompt => 'Hello', max_tokens => 6, temperature => 1,
                    ignore_eos => $T, logit_bias => { 77 => 100 }, logprobs => 0);
my @forced = @{ $r->{json}{choices}[0]{logprobs}{tokens} };
is(scalar(grep { $_ eq $forced[0] } @forced), 6, 'logit_bias +100 forces one token at T = 1');
my $r2 = $t->completion(prompt => 'Hello', max_tokens => 6, temperature => 1,
                        ignore_eos => $T, logit_bias => { 78 => 100 }, logprobs => 0);
isnt($r2->{json}{choices}[0]{logprobs}{tokens}[0], $forced[0],
     'another biased id forces another token');

$r = $t->completion(prompt => 'Hello', max_tokens => 8, temperature => 0,
                    logit_bias => { 77 => 100 }, stop_token_ids => [77]);
is($r->{json}{usage}{completion_tokens}, 1, 'stop_token_ids: stops at the first stop token');
is($r->{json}{choices}[0]{finish_reason}, 'stop', 'stop_token_ids: finish_reason stop');

$r = $t->completion(prompt => 'Hello', max_tokens => 8, temperature => 0,
                    logit_bias => { 77 => 100 }, stop_token_ids => [77],
                    min_tokens => 3);
is($r->{json}{usage}{completion_tokens}, 4, 'min_tokens 3 masks the stop token 3 times');

$r = $t->completion(prompt => 'Hello', max_tokens => 8, temperature => 0,
                    logit_bias => { $EOS => 100 });
is($r->{json}{usage}{completion_tokens}, 1, 'a forced eos ends at once');
$r = $t->completion(prompt => 'Hello', max_tokens => 8, temperature => 0,
                    logit_bias => { $EOS => 100 }, min_tokens => 5);
is($r->{json}{usage}{completion_tokens}, 6, 'min_tokens 5 masks eos 5 times');
is($r->{json}{choices}[0]{finish_reason}, 'stop', 'and then eos stops it');

# ---- seeds and penalties ----

my %hot = (prompt => 'Once upon', max_tokens => 16, temperature => 1,
           ignore_eos => $T);
my @seeded = map { $t->completion(%hot, seed => 1234)->{json}{choices}[0]{text} } 1 .. 2;
is($seeded[0], $seeded[1], 'the same seed gives the same text');
my @other = map { $t->completion(%hot, seed => $_)->{json}{choices}[0]{text} } 1 .. 4;
ok(scalar(grep { $_ ne $seeded[0] } @other) >= 1, 'other seeds give other texts');

# a small bias makes greedy repeat itself; each penalty must break that
sub repeats {
    my %seen;
    return scalar grep { $seen{$_}++ } @_;
}
my %loop = (prompt => 'Hello world', max_tokens => 12, temperature => 0,
            ignore_eos => $T, logit_bias => { 77 => 5 }, logprobs => 0);
my $plain = repeats(@{ $t->completion(%loop)->{json}{choices}[0]{logprobs}{tokens} });
ok($plain >= 2, "the biased greedy text repeats tokens ($plain repeats)");
for my $p ([ repetition_penalty => 1.5 ], [ frequency_penalty => 2 ],
           [ presence_penalty => 2 ])
{
    my $n = repeats(@{ $t->completion(%loop, @$p)->{json}{choices}[0]{logprobs}{tokens} });
    ok($n < $plain, "$p->[0] $p->[1]: fewer repeats ($n < $plain)");
}
my $neg = repeats(@{ $t->completion(%loop, presence_penalty => -2)->{json}{choices}[0]{logprobs}{tokens} });
ok($neg >= $plain, "a negative presence_penalty does not reduce them ($neg)");

idle_ok('after everything');
unlike($t->error_log, qr/\[(alert|crit|emerg)\]/, 'no alerts in the error log');
$t->finish;

# ---- defaults from generation_config.json ----

# the same tiny model whose generation_config.json asks for top_k 1: a
# request that leaves top_k out is greedy, one that turns it off is not
my $model = PagedLLM::Test->new->dir . '/model';
mkdir $model or die "$model: $!";
my $tiny = "$ENV{PAGEDLLM_BUILD}/models/tiny";
opendir my $dh, $tiny or die "$tiny: $!";
for my $f (grep { -f "$tiny/$_" && $_ ne 'generation_config.json' } readdir $dh) {
    symlink("$tiny/$f", "$model/$f") or die "symlink $f: $!";
}
open my $gc, '>', "$model/generation_config.json" or die $!;
print $gc $J->encode({ bos_token_id => 510, eos_token_id => 511,
                       temperature => 0.7, top_k => 1 });
close $gc;

my $d = PagedLLM::Test->new(model => $model)->start;
my %plain = (prompt => 'Hello world', max_tokens => 24, ignore_eos => $T);
my @def = map { $d->completion(%plain, seed => $_)->{json}{choices}[0]{text} } 1 .. 3;
is_deeply(\@def, [ ($text) x 3 ],
          'generation_config top_k 1 applies when the request leaves top_k out');
my @off = map { $d->completion(%plain, seed => $_, top_k => -1)->{json}{choices}[0]{text} } 1 .. 3;
ok(scalar(grep { $_ ne $text } @off) >= 1,
   'and a request that sets top_k overrides it');
$d->finish;

done_testing;
