#!/usr/bin/perl
# Batched prompts on /v1/completions (issue 24 item 3): prompt as a list
# of strings or of token-id lists.  Choices are indexed prompt x n as
# OpenAI indexes them (prompt k's choices are k * n .. k * n + n - 1),
# each the completion that prompt gets alone; usage sums the prompts;
# streamed events carry the same indexes and text; echo gives each
# choice its own prompt; the limits (how many prompts, each prompt's
# length, ids, mixed lists) are 400s; a client that leaves aborts every
# prompt's generation and no KV block stays used.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;
use Time::HiRes qw(time);

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $t = PagedLLM::Test->new->start;

my @prompts = ('Once upon a time', 'The sea', 'Numbers: 1, 2, 3');
my %greedy = (max_tokens => 5, temperature => 0,
              ignore_eos => JSON::PP::true);

sub refused {
    my ($r, $name, $why) = @_;
    my $e = ($r->{json} // {})->{error} // {};
    ok($r->{status} == 400 && ($e->{param} // '') eq 'prompt'
       && ($e->{message} // '') =~ $why,
       "$name: 400 naming prompt, saying why")
        or diag("status $r->{status}: $r->{body}");
}

# each prompt alone, the reference
my @alone = map { $t->json_ok($t->completion(prompt => $_, %greedy),
                          "'$_' alone") } @prompts;

# ---- a list of strings, n = 2 --------------------------------------------

my $batch = $t->json_ok($t->completion(prompt => \@prompts, n => 2, %greedy),
                'three prompts, n 2');
my @ch = sort { $a->{index} <=> $b->{index} } @{ $batch->{choices} // [] };
is(scalar @ch, 6, 'three prompts x n 2: six choices');
is_deeply([ map { $_->{index} } @ch ], [0 .. 5], 'indexed 0 to 5');
is_deeply([ map { $_->{text} } @ch ],
          [ map { ($_->{choices}[0]{text}) x 2 } @alone ],
          'choice k * n + i is prompt k\'s greedy completion, as alone');
my $sum_prompt = 0;
$sum_prompt += $_->{usage}{prompt_tokens} for @alone;
is($batch->{usage}{prompt_tokens}, $sum_prompt,
   'usage: prompt_tokens sums the prompts');
is($batch->{usage}{completion_tokens}, 6 * 5,
   'usage: completion_tokens sums the six choices');
is($batch->{usage}{total_tokens}, $sum_prompt + 30, 'usage: total');
is(scalar(grep { ($_->{finish_reason} // '') eq 'length' } @ch), 6,
   'each choice finished by length');

# ---- a list of token-id lists -------------------------------------------

my @ids = map { $t->request(POST => '/v1/tokenize',
                            $J->encode({ prompt => $_ }))->{json}{tokens} }
          @prompts;
my $bi = $t->json_ok($t->completion(prompt => \@ids, %greedy),
                 'three prompts of ids');
is_deeply([ map { $_->{text} }
            sort { $a->{index} <=> $b->{index} } @{ $bi->{choices} } ],
          [ map { $_->{choices}[0]{text} } @alone ],
          'the ids of each prompt complete as its text does');
is($bi->{usage}{prompt_tokens}, $sum_prompt,
   'usage: the ids counted as given');

# ---- streamed --------------------------------------------------------------

my $s = $t->stream_json('/v1/completions', prompt => \@prompts, n => 2,
                        %greedy,
                        stream_options => { include_usage =>
                                            JSON::PP::true });
ok($s->{status} == 200 && $s->{done} && !$s->{error},
   'streamed: 200, ends with [DONE]') or diag($J->encode($s));
my (%text, %reason, $usage);
for my $ev (@{ $s->{events} }) {
    $usage = $ev->{usage} if $ev->{usage};
    for my $c (@{ $ev->{choices} // [] }) {
        $text{$c->{index}} .= $c->{text};
        $reason{$c->{index}} = $c->{finish_reason} if $c->{finish_reason};
    }
}
is_deeply([ sort { $a <=> $b } keys %text ], [0 .. 5],
          'streamed: events for indexes 0 to 5');
is_deeply([ map { $text{$_} } 0 .. 5 ], [ map { $_->{text} } @ch ],
          'streamed: each index\'s text is the whole answer\'s');
is(scalar(grep { $_ eq 'length' } values %reason), 6,
   'streamed: a finish_reason for each of the six');
is($usage->{prompt_tokens}, $sum_prompt, 'streamed usage: prompts summed');
is($usage->{completion_tokens}, 30, 'streamed usage: completions summed');

# ---- echo: each choice begins with its own prompt --------------------------

my $e = $t->json_ok($t->completion(prompt => \@prompts, echo => JSON::PP::true,
                               %greedy), 'batched echo');
is_deeply([ map { $_->{text} }
            sort { $a->{index} <=> $b->{index} } @{ $e->{choices} } ],
          [ map { $prompts[$_] . $alone[$_]{choices}[0]{text} } 0 .. 2 ],
          'echo: each choice is its prompt, then its completion');

my $ei = $t->json_ok($t->completion(prompt => \@ids, echo => JSON::PP::true,
                                %greedy), 'batched echo of ids');
my @decoded = map { $t->request(POST => '/v1/detokenize',
                                $J->encode({ tokens => $_ }))->{json}{prompt} }
              @ids;
is_deeply([ map { $_->{text} }
            sort { $a->{index} <=> $b->{index} } @{ $ei->{choices} } ],
          [ map { $decoded[$_] . $alone[$_]{choices}[0]{text} } 0 .. 2 ],
          'echo of ids: each prompt\'s ids decoded, then its completion');

# ---- seeded sampling, best_of --------------------------------------------

my %seeded = (max_tokens => 6, temperature => 1, seed => 11,
              ignore_eos => JSON::PP::true);
my @seeded_alone = map { $t->json_ok($t->completion(prompt => $_, %seeded),
                                 "seeded '$_' alone")->{choices}[0]{text} }
                   @prompts[0, 1];
my $sb = $t->json_ok($t->completion(prompt => [ @prompts[0, 1] ], %seeded),
                 'two seeded prompts');
is_deeply([ map { $_->{text} }
            sort { $a->{index} <=> $b->{index} } @{ $sb->{choices} } ],
          \@seeded_alone, 'a seed gives each prompt its own draw as alone');

my $bo = $t->json_ok($t->completion(prompt => [ @prompts[0, 1] ], n => 1,
                                best_of => 3, %seeded),
                 'two prompts, best_of 3');
is_deeply([ sort map { $_->{index} } @{ $bo->{choices} } ], [0, 1],
          'best_of 3, n 1: one choice for each prompt');

# ---- usage: the prefix cache's tokens summed over the prompts -----------------

my $lead = 'A long shared opening that fills a few blocks of the cache: ' x 3;
$t->json_ok($t->completion(prompt => $lead, max_tokens => 1), 'a long prompt');
my $one = $t->json_ok($t->completion(prompt => $lead . 'one', max_tokens => 1),
                  'its prefix again');
my $hit = $one->{usage}{prompt_tokens_details}{cached_tokens};
ok($hit >= 16, "one prompt reuses its prefix's blocks ($hit tokens)");
my $two = $t->json_ok($t->completion(prompt => [ $lead . 'two', $lead . 'three',
                                             'Unrelated' ],
                                 max_tokens => 1), 'two of them batched');
is($two->{usage}{prompt_tokens_details}{cached_tokens}, 2 * $hit,
   'batched: cached_tokens sums the prompts\' hits');

# ---- limits ------------------------------------------------------------------

refused($t->completion(prompt => [ ('x') x 65 ], max_tokens => 1),
        '65 prompts', qr/more than the 64/);
$t->json_ok($t->completion(prompt => [ ('x') x 64 ], max_tokens => 1),
        '64 prompts');
refused($t->completion(prompt => [ 'a', [1, 2] ], max_tokens => 1),
        'a string and a list of ids', qr/all strings or all arrays/);
refused($t->completion(prompt => [ [1, 2], [] ], max_tokens => 1),
        'an empty list of ids', qr/all strings or all arrays/);
refused($t->completion(prompt => [ [1, 2], [3, 999999999] ],
                       max_tokens => 1),
        'an id outside the vocabulary', qr/./);

my $ctx = $t->request(GET => '/v1/models')->{json}{data}[0]{max_model_len};
my $r = $t->completion(prompt => [ [1, 2], [ (5) x $ctx ] ],
                       max_tokens => 1);
ok($r->{status} == 400 && $r->{body} =~ /maximum context length/,
   'a prompt past the context among short ones: 400')
    or diag($r->{body});
$r = $t->completion(prompt => [ [1, 2], [ (5) x ($ctx - 4) ] ],
                    max_tokens => 8);
ok($r->{status} == 400 && $r->{body} =~ /maximum context length/,
   'a prompt that leaves no room for max_tokens: 400')
    or diag($r->{body});

# ---- a client that leaves aborts every prompt --------------------------------

my $long = $ctx - 40;
my $st = $t->stream_start('/v1/completions',
    $J->encode({ prompt => [ 'Go on', 'And on', 'Further' ],
                 max_tokens => $long, ignore_eos => JSON::PP::true,
                 stream => JSON::PP::true }));
is($st->{status}, 200, 'a long batched stream starts');
PagedLLM::Test::read_chunks([$st], time + 30, 3);
my $busy = $t->wait_status(sub { $_[0]{requests}{running} >= 3 }, 10);
ok($busy->{json}{requests}{running} >= 3,
   'its three prompts run as three requests')
    or diag($J->encode($busy->{json}));
close $st->{sock};
my $idle = $t->wait_status(sub {
    $_[0]{requests}{running} == 0 && $_[0]{requests}{waiting} == 0
        && $_[0]{kv_blocks}{used} == 0
}, 10);
is($idle->{json}{kv_blocks}{used}, 0,
   'after the client left: every prompt aborted, no KV block used')
    or diag($J->encode($idle->{json}));
ok($idle->{json}{generation_tokens_total} < 3 * $long,
   'the generations stopped early');

# and the server goes on
$t->json_ok($t->completion(prompt => \@prompts, max_tokens => 2), 'after that');

$t->finish;
done_testing();
