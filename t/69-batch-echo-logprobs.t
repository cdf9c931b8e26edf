#!/usr/bin/perl
# echo with logprobs on /v1/completions (issue 24 item 3): the prompt's
# tokens come back before the generated ones, each with its logprob
# given the tokens before it (the first one's null, as OpenAI gives it)
# and its top_logprobs.  The prompt's logprobs are the engine's own: a
# greedy continuation's logprobs, fed back as part of the prompt, come
# back the same from the prefill; a long prompt (many chunks, more rows
# than one iteration projects) and a prompt whose blocks sit in the
# prefix cache are scored at every position, on one rank and on two;
# streamed, batched and n > 1 answers carry them too.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use List::Util qw(max);
use Test::More;

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $t = PagedLLM::Test->new->start;

my %greedy = (temperature => 0, ignore_eos => JSON::PP::true);

sub close_all {
    my ($got, $want, $tol) = @_;
    return 0 unless @$got == @$want;
    for my $i (0 .. $#$got) {
        return 0 unless defined $got->[$i] && defined $want->[$i]
                        && abs($got->[$i] - $want->[$i]) <= $tol;
    }
    return 1;
}

my $prompt = 'Once upon a time there was';
my @ids = @{ $t->token_ids($prompt) };
my $np = @ids;

# ---- the answer's shape -----------------------------------------------------

my $plain = $t->json_ok($t->completion(prompt => $prompt, max_tokens => 4,
                                   logprobs => 2, %greedy), 'logprobs');
my $e = $t->json_ok($t->completion(prompt => $prompt, max_tokens => 4,
                               logprobs => 2, echo => JSON::PP::true,
                               %greedy), 'echo with logprobs');
my $c = $e->{choices}[0];
my $lp = $c->{logprobs};
is(scalar @{ $lp->{tokens} }, $np + 4,
   "tokens: the prompt's $np, then the 4 generated");
ok(!defined $lp->{token_logprobs}[0] && !defined $lp->{top_logprobs}[0],
   'the first prompt token: logprob and top_logprobs null');
is(scalar(grep { defined $_ && $_ <= 0 }
          @{ $lp->{token_logprobs} }[1 .. $np + 3]), $np + 3,
   'every other token has a logprob <= 0');
is(scalar(grep { ref $_ eq 'HASH' && keys(%$_) >= 1 && keys(%$_) <= 2 }
          @{ $lp->{top_logprobs} }[1 .. $np + 3]), $np + 3,
   'and top_logprobs of 1 or 2 entries');
is($c->{text}, join('', @{ $lp->{tokens} }),
   'the text is the tokens\' text, prompt first');
ok(index($c->{text}, $prompt) >= 0 && $c->{text} =~ /\Q$plain->{choices}[0]{text}\E$/,
   'the prompt, then the same completion as without echo');
is_deeply([ @{ $lp->{token_logprobs} }[$np .. $np + 3] ],
          $plain->{choices}[0]{logprobs}{token_logprobs},
          'the generated tokens\' logprobs as without echo');
is($e->{usage}{completion_tokens}, 4, 'usage counts the completion alone');
is($e->{usage}{prompt_tokens}, $np, 'and the prompt as usual');

# ---- the engine's own logprobs ---------------------------------------------

# a greedy continuation, its tokens and logprobs from the decode steps
my $cont = $t->json_ok($t->completion(prompt => \@ids, max_tokens => 6,
                                  logprobs => 3, %greedy),
                   'a greedy continuation of the ids');
my @gen_lp = @{ $cont->{choices}[0]{logprobs}{token_logprobs} };
# the generated tokens' ids, as long as each one's text alone is that
# one token (a piece of a character is not)
my @gen_ids;
for my $text (@{ $cont->{choices}[0]{logprobs}{tokens} }) {
    my $one = $t->request(POST => '/v1/tokenize',
                          $J->encode({ prompt => $text,
                                       add_special_tokens => JSON::PP::false })
                         )->{json}{tokens} // [];
    last unless @$one == 1 && $text !~ /\x{fffd}/;
    push @gen_ids, $one->[0];
}
my $k = @gen_ids;
ok($k >= 3, "the first $k generated tokens known by id");
my $back = $t->json_ok($t->completion(prompt => [ @ids, @gen_ids ],
                                  max_tokens => 1, logprobs => 3,
                                  echo => JSON::PP::true, %greedy),
                   'the continuation fed back as prompt');
my @p = @{ $back->{choices}[0]{logprobs}{token_logprobs} };
ok(close_all([ @p[$np .. $np + $k - 1] ], [ @gen_lp[0 .. $k - 1] ], 1e-3),
   'its prompt logprobs are the decode steps\' logprobs')
    or diag($J->encode([ [ @p[$np .. $np + $k - 1] ], \@gen_lp ]));
my @tops_back = @{ $back->{choices}[0]{logprobs}{top_logprobs} };
my @tops_gen = @{ $cont->{choices}[0]{logprobs}{top_logprobs} };
is_deeply([ map { [ sort keys %{ $tops_back[$np + $_] } ] } 0 .. $k - 1 ],
          [ map { [ sort keys %{ $tops_gen[$_] } ] } 0 .. $k - 1 ],
          'and their top_logprobs name the same tokens');

# the same with ids straight from the engine: no re-tokenizing
my $tok_cont = $t->json_ok($t->completion(prompt => \@ids, max_tokens => 5,
                                      logprobs => 1, echo => JSON::PP::true,
                                      %greedy), 'echo of ids');
my @all_lp = @{ $tok_cont->{choices}[0]{logprobs}{token_logprobs} };
my @all_tok = @{ $tok_cont->{choices}[0]{logprobs}{tokens} };
is(scalar @all_lp, $np + 5, 'prompt and completion tokens');

# ---- a long prompt: many chunks and more rows than one iteration --------------

my $ctx = $t->request(GET => '/v1/models')->{json}{data}[0]{max_model_len};
my @long = map { 1 + ($_ * 37) % 400 } 1 .. 600;
my $l1 = $t->json_ok($t->completion(prompt => \@long, max_tokens => 1,
                                logprobs => 1, echo => JSON::PP::true,
                                %greedy), '600-token prompt, echo logprobs');
my @llp = @{ $l1->{choices}[0]{logprobs}{token_logprobs} };
is(scalar @llp, 601, 'a logprob entry for each of the 600 and the one');
is(scalar(grep { defined $_ && $_ <= 0 } @llp[1 .. 599]), 599,
   'every prompt position but the first scored');

# position k's logprob is the last prompt position's of the first k + 1
my @spot;
for my $k (5, 130, 257, 599) {
    my $r = $t->json_ok($t->completion(prompt => [ @long[0 .. $k] ],
                                   max_tokens => 1, logprobs => 1,
                                   echo => JSON::PP::true, %greedy),
                    "the first " . ($k + 1) . " tokens alone");
    push @spot, [ $k, $r->{choices}[0]{logprobs}{token_logprobs}[$k] ];
}
ok(close_all([ map { $llp[$_->[0]] } @spot ], [ map { $_->[1] } @spot ],
             1e-3),
   'each position scored as the prompt that ends there scores it')
    or diag($J->encode([ map { [ $_->[0], $llp[$_->[0]], $_->[1] ] } @spot ]));

# its blocks are in the prefix cache now: still every position, the same
my $again = $t->json_ok($t->completion(prompt => \@long, max_tokens => 1,
                                   logprobs => 1, echo => JSON::PP::true,
                                   %greedy), 'the same prompt, cached');
ok(close_all([ @{ $again->{choices}[0]{logprobs}{token_logprobs} }[1 .. 599] ],
             [ @llp[1 .. 599] ], 1e-5),
   'a cached prefix is scored again, to the same logprobs');
my $plain_again = $t->json_ok($t->completion(prompt => \@long, max_tokens => 1),
                          'the same prompt without echo');
ok($plain_again->{usage}{prompt_tokens_details}{cached_tokens} >= 512,
   'which the prefix cache serves');

# ---- streamed -----------------------------------------------------------------

my $s = $t->stream_json('/v1/completions', prompt => $prompt,
                        max_tokens => 4, logprobs => 2,
                        echo => JSON::PP::true, %greedy);
ok($s->{status} == 200 && $s->{done}, 'streamed: 200 and [DONE]');
my (@st_tok, @st_lp);
for my $ev (@{ $s->{events} }) {
    for my $ch (@{ $ev->{choices} // [] }) {
        next unless $ch->{logprobs};
        push @st_tok, @{ $ch->{logprobs}{tokens} };
        push @st_lp, @{ $ch->{logprobs}{token_logprobs} };
    }
}
is_deeply(\@st_tok, $lp->{tokens}, 'streamed: the same tokens, prompt first');
is_deeply(\@st_lp, $lp->{token_logprobs}, 'streamed: the same logprobs');

# ---- n 2 and batched prompts ---------------------------------------------------

my $two = $t->json_ok($t->completion(prompt => $prompt, max_tokens => 3, n => 2,
                                 seed => 3, temperature => 1,
                                 logprobs => 1, echo => JSON::PP::true),
                  'n 2');
is_deeply([ map { [ @{ $_->{logprobs}{token_logprobs} }[0 .. $np - 1] ] }
            @{ $two->{choices} } ],
          [ ([ @{ $lp->{token_logprobs} }[0 .. $np - 1] ]) x 2 ],
          'n 2: each choice begins with the prompt\'s logprobs');

my @prompts = ('The sea', $prompt);
my $batch = $t->json_ok($t->completion(prompt => \@prompts, max_tokens => 2,
                               logprobs => 2, echo => JSON::PP::true,
                               %greedy), 'batched prompts');
my @bc = sort { $a->{index} <=> $b->{index} } @{ $batch->{choices} };
my $n0 = @{ $t->token_ids($prompts[0]) };
is(scalar @{ $bc[0]{logprobs}{tokens} }, $n0 + 2,
   'batched: the first choice has the first prompt\'s tokens');
is_deeply([ @{ $bc[1]{logprobs}{token_logprobs} }[0 .. $np - 1] ],
          [ @{ $lp->{token_logprobs} }[0 .. $np - 1] ],
          'batched: the second its own prompt\'s logprobs');

# ---- what stays refused ----------------------------------------------------------

my $r = $t->completion(prompt => $prompt, max_tokens => 2, echo =>
                       JSON::PP::true, logprobs => 1, use_beam_search =>
                       JSON::PP::true, best_of => 2, temperature => 0);
is($r->{status}, 400, 'echo with logprobs and beam search: 400')
    or diag($r->{body});

$t->finish;

# ---- tensor parallelism: the logits rows gathered on the host ------------------

my $tp = PagedLLM::Test->new(engine_args => ['--tensor-parallel-size', '2'])
                       ->start;
my $tpe = $tp->completion(prompt => \@long, max_tokens => 1, logprobs => 1,
                          echo => JSON::PP::true, %greedy);
is($tpe->{status}, 200, 'two ranks: echo with logprobs, 600 tokens')
    or diag($tpe->{body});
ok(close_all([ @{ $tpe->{json}{choices}[0]{logprobs}{token_logprobs} }
               [1 .. 599] ], [ @llp[1 .. 599] ], 1e-3),
   'two ranks: every position scored as on one');
$tp->finish;

done_testing();
