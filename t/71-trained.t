#!/usr/bin/perl
# 71-trained.t: the engine on trained weights (models/kjv-small, the model
# make run serves) against its golden references, through the HTTP API on
# the CPU.
#
# The references (models/kjv-small/golden.json) come from
# tools/train-small/make_golden.py: a plain-PyTorch restatement of
# LlamaForCausalLM's forward pass in float32 over the bf16 weights, which is
# what the CPU backend computes, so only float32 summation order differs.
# transformers is not installed on the machine that trained the model, so
# it is not the reference here; the engine's Llama forward itself is
# checked against transformers on random-weight fixtures (t/unit/golden.c).
# It runs the CPU backend; no GPU test compares trained weights yet.
#
#   - the model folder's tokenizer: pagedllm-tokenize and the reference
#     @huggingface/tokenizers give the same ids for 2,400+ varied strings
#     and the golden texts, and the server's /tokenize the golden ids;
#   - greedy continuations (24 tokens) of ten verse openings equal the
#     reference's token for token (every step's top-2 logit gap is listed
#     in golden.json; the smallest is far above float32 noise), from the
#     prompt as ids and as text;
#   - "In the beginning God created" continues " the heaven and the earth";
#   - the held-out passage's per-token logprobs from the prompt
#     (echo + logprobs) equal the reference's within 1e-4 each and its
#     perplexity within a relative 1e-4 (why these: below);
#   - a chat turn comes back in the template's format: the greedy answer,
#     no header token or template text in it, ended by <|eot_id|> (finish
#     reason stop), streamed and not.

use strict;
use warnings;

use lib 't/lib';
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Temp qw(tempdir);
use JSON::PP;
use List::Util qw(max sum);
use Test::More;

use PagedLLM::Test;

my $J     = $PagedLLM::Test::JSON;
my $root  = abs_path(dirname(__FILE__) . '/..');
my $model = "$root/models/kjv-small";
my $build = $ENV{PAGEDLLM_BUILD} // "$root/build";
my $dir   = tempdir(CLEANUP => 1);

# The engine and the reference both compute in float32 from the same bf16
# weights and differ by summation order only: float32 keeps 24 bits
# (relative 6e-8 a rounding), sums of a few hundred terms through four
# layers move a logit by about 1e-6 of its size, and logits here stay
# below 30, so a logprob (a logit minus a log-sum-exp) moves by some 1e-5
# at most; the API sends the engine's float32 logprobs unrounded.  The
# difference measured is 9e-6 at worst over the passage.  TOKEN_TOL is
# 1e-4, ten times that bound, and far below what a real mistake does (a
# wrong token, position, scale or norm moves logprobs by 0.01 or more).
# The perplexity is exp(mean NLL): its relative error is the mean NLL's
# error, at most the largest token's, hence PPL_REL_TOL = TOKEN_TOL.
my $TOKEN_TOL   = 1e-4;
my $PPL_REL_TOL = $TOKEN_TOL;

sub slurp {
    my ($f) = @_;
    open(my $fh, '<:raw', $f) or die "$f: $!";
    local $/;
    return <$fh>;
}

my $g = $J->decode(slurp("$model/golden.json"));
is(scalar @{ $g->{cases} }, 10, 'golden.json: ten greedy cases');

# ---- the tokenizer: pagedllm's against the reference ------------------------

my $node = "$root/t/node";
my $corpus = "$dir/corpus.txt";
is(system("node $node/corpus.mjs > $corpus"), 0, 'tokenizer corpus generated');
{
    open(my $fh, '>>:raw', $corpus) or die "$corpus: $!";
    print $fh $J->encode($_), "\n"
        for (map({ $_->{prompt} } @{ $g->{cases} }),
             map({ $_->{prompt} . $_->{greedy_text} } @{ $g->{cases} }),
             $g->{perplexity}{text}, $g->{chat}{prompt});
}
my $tj = "$model/tokenizer.json";
for my $flags ('', '--no-special') {
    my $c = `$build/pagedllm-tokenize --tokenizer $tj $flags < $corpus`;
    my $r = `node $node/tok-ref.mjs --tokenizer $tj $flags < $corpus`;
    my @c = split /\n/, $c;
    my @r = split /\n/, $r;
    ok(@r > 2000 && @c == @r && !grep({ $c[$_] ne $r[$_] } 0 .. $#r),
       "tokenize $flags: pagedllm-tokenize equals \@huggingface/tokenizers"
       . " on " . scalar(@r) . " strings");
}

my $t = PagedLLM::Test->new(model => $model)->start;

sub ok_json {
    my ($r, $name) = @_;
    is($r->{status}, 200, "$name: 200") or diag($r->{body});
    return $r->{json} // {};
}

for my $c (@{ $g->{cases} }[0, 1]) {
    my $r = ok_json($t->request(POST => '/v1/tokenize',
                                $J->encode({ prompt => $c->{prompt} })),
                    "/v1/tokenize $c->{ref}");
    is_deeply($r->{tokens}, $c->{prompt_ids},
              "/v1/tokenize $c->{ref}: the golden prompt ids");
}

# ---- greedy continuations ---------------------------------------------------

my %greedy = (temperature => 0, ignore_eos => JSON::PP::true,
              max_tokens => $g->{greedy_tokens});

for my $c (@{ $g->{cases} }) {
    my $r = ok_json($t->completion(prompt => $c->{prompt_ids}, logprobs => 1,
                                   %greedy), "$c->{ref} greedy");
    my $got = $r->{choices}[0]{logprobs}{tokens} // [];
    is_deeply($got, $c->{greedy_tokens},
              "$c->{ref}: \"$c->{prompt}\" continues token for token "
              . "(smallest top-2 gap $c->{min_gap})")
        or diag("got  " . $J->encode(join '', @$got)
                . "\nwant " . $J->encode($c->{greedy_text}));
    my $s = ok_json($t->completion(prompt => $c->{prompt}, %greedy),
                    "$c->{ref} greedy from text");
    is($s->{choices}[0]{text}, $c->{greedy_text},
       "$c->{ref}: the same continuation from the prompt's text");
}

my $first = $g->{cases}[0];
is($first->{prompt}, 'In the beginning God created', 'the known passage');
my $gen = $t->completion(prompt => $first->{prompt}, max_tokens => 8,
                         temperature => 0)->{json};
like($gen->{choices}[0]{text} // '', qr/^ the heaven and the earth\b/,
     '"In the beginning God created" continues " the heaven and the earth"');

# ---- held-out perplexity from the prompt's logprobs -------------------------

my $p = $g->{perplexity};
my $e = ok_json($t->completion(prompt => $p->{ids}, max_tokens => 1,
                               echo => JSON::PP::true, logprobs => 1,
                               temperature => 0), "$p->{ref} echo logprobs");
my $lp = $e->{choices}[0]{logprobs}{token_logprobs} // [];
my $n = @{ $p->{ids} };
ok(@$lp == $n + 1 && !defined $lp->[0],
   "$p->{ref}: $n prompt logprobs (the first null) and one generated");
my @want = @{ $p->{token_logprobs} }[1 .. $n - 1];
my @got = @$lp[1 .. $n - 1];
my $worst = max(map { abs(($got[$_] // 1e9) - $want[$_]) } 0 .. $#want);
cmp_ok($worst, '<=', $TOKEN_TOL,
       "$p->{ref}: every token's logprob within $TOKEN_TOL of the reference"
       . sprintf(' (largest difference %.2g)', $worst));
my $nll = -sum(map { $_ // 0 } @got) / ($n - 1);
my $ppl = exp($nll);
cmp_ok(abs($ppl - $p->{perplexity}) / $p->{perplexity}, '<=', $PPL_REL_TOL,
       sprintf('%s: perplexity %.5f, the reference\'s %.5f (relative '
               . 'tolerance %g)', $p->{ref}, $ppl, $p->{perplexity},
               $PPL_REL_TOL));

# ---- a chat turn ----------------------------------------------------------------

my $chat = $g->{chat};
my %ask = (messages => $chat->{messages}, temperature => 0,
           max_tokens => 64);
ok($chat->{ends_with_eot}, 'the reference\'s chat answer ends with <|eot_id|>');
my $a = ok_json($t->request(POST => '/v1/chat/completions',
                            $J->encode(\%ask)), 'chat');
my $msg = $a->{choices}[0]{message} // {};
is($msg->{role}, 'assistant', 'chat: the assistant answers');
is($msg->{content}, $chat->{answer}, 'chat: the reference\'s greedy answer');
unlike($msg->{content} // '<|', qr/<\||\|>|\bassistant\b|\buser\b/,
       'chat: no header token or role name leaked into the answer');
is($a->{choices}[0]{finish_reason}, 'stop',
   'chat: ended by <|eot_id|> (stop), before max_tokens');
is($a->{usage}{completion_tokens}, scalar @{ $chat->{greedy_ids} },
   'chat: the answer\'s tokens, <|eot_id|> counted');
is($a->{usage}{prompt_tokens}, scalar @{ $chat->{prompt_ids} },
   'chat: the prompt is the template\'s rendering');

my $st = $t->stream_json('/v1/chat/completions', %ask);
ok($st->{status} == 200 && $st->{done} && !$st->{error},
   'streamed chat: 200, ends with [DONE]');
my $text = join '', map { $_->{choices}[0]{delta}{content} // '' }
                    @{ $st->{events} };
is($text, $chat->{answer}, 'streamed chat: the same answer');
my @fin = grep { defined } map { $_->{choices}[0]{finish_reason} }
                           @{ $st->{events} };
is_deeply(\@fin, ['stop'], 'streamed chat: finish_reason stop, once');

$t->finish;
done_testing();
