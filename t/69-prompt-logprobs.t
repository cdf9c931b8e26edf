#!/usr/bin/perl
# vLLM's prompt_logprobs (issue 24): an integer k in 0..20 on
# /v1/completions (a list on each choice) and /v1/chat/completions (one
# list beside the choices).  The list has null for the prompt's first
# token, then per position an object keyed by token id: the prompt's own
# token and the k most likely there, each {logprob, rank, decoded_token}.
# Checked: the shape; the values are the echo-with-logprobs path's for
# the same prompt; ranks agree with the top entries and across k; n > 1,
# best_of, batched prompts and a prompt of many records; the openai npm client
# passes the field through; bad values, a stream with k > 0 and beam
# search are 400s naming why; the KV blocks all come back.

use strict;
use warnings;

use lib 't/lib';
use Cwd qw(abs_path);
use JSON::PP;
use Test::More;

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $root = $ENV{PAGEDLLM_ROOT} // '.';
my $t = PagedLLM::Test->new->start;

my %greedy = (temperature => 0, ignore_eos => JSON::PP::true);

sub chat {
    my (%req) = @_;
    return $t->request(POST => '/v1/chat/completions', $J->encode(\%req));
}

# what is wrong with list $l as the prompt_logprobs of prompt ids $ids
# with k top entries: '' when nothing
sub shape_problem {
    my ($l, $ids, $k) = @_;
    return 'not a list' unless ref $l eq 'ARRAY';
    return 'length ' . @$l . ', want ' . @$ids unless @$l == @$ids;
    return 'the first position is not null' if defined $l->[0];
    for my $i (1 .. $#$l) {
        my $pos = $l->[$i];
        return "position $i is not an object" unless ref $pos eq 'HASH';
        my $own = $pos->{ $ids->[$i] }
            or return "position $i lacks its prompt token $ids->[$i]";
        my @top = grep { $pos->{$_}{rank} <= $k } keys %$pos;
        return "position $i has " . @top . " entries ranked 1..$k"
            unless @top == $k;
        return "position $i has " . keys(%$pos) . ' entries'
            unless keys %$pos == $k + ($own->{rank} > $k ? 1 : 0);
        for my $id (keys %$pos) {
            my $e = $pos->{$id};
            return "position $i, $id: not {logprob, rank, decoded_token}"
                unless $id =~ /^\d+$/ && keys %$e == 3
                       && defined $e->{logprob} && $e->{logprob} <= 0
                       && defined $e->{rank} && $e->{rank} =~ /^\d+$/
                       && $e->{rank} >= 1
                       && defined $e->{decoded_token}
                       && !ref $e->{decoded_token};
        }
        my @by_rank = sort { $pos->{$a}{rank} <=> $pos->{$b}{rank} } @top;
        return "position $i: ranks 1..$k are not 1..$k"
            unless join(',', map { $pos->{$_}{rank} } @by_rank)
                   eq join(',', 1 .. $k);
        for my $j (1 .. $#by_rank) {
            return "position $i: rank $j less likely than rank " . ($j + 1)
                if $pos->{ $by_rank[$j] }{logprob}
                   > $pos->{ $by_rank[$j - 1] }{logprob};
        }
        return "position $i: the prompt token ranked $own->{rank} is "
               . 'more likely than the last of the top'
            if $own->{rank} > $k && $k > 0
               && $own->{logprob} > $pos->{ $by_rank[-1] }{logprob};
    }
    return '';
}

my $prompt = 'Once upon a time there was';
my @ids = @{ $t->token_ids($prompt) };
my $np = @ids;

# ---- completions: the shape ------------------------------------------------

my $r3 = $t->json_ok($t->completion(prompt => $prompt, max_tokens => 3,
                                prompt_logprobs => 3, %greedy),
                 'prompt_logprobs 3');
my $l3 = $r3->{choices}[0]{prompt_logprobs};
is(shape_problem($l3, \@ids, 3), '',
   "a list of $np: null, then the prompt token and the top 3 by id");
ok(!defined $r3->{choices}[0]{logprobs},
   'logprobs not asked: the choice\'s logprobs null');
ok(!exists $r3->{prompt_logprobs}, 'completions: nothing beside the choices');
my $plain = $t->json_ok($t->completion(prompt => $prompt, max_tokens => 3,
                                   %greedy), 'without');
ok(!exists $plain->{choices}[0]{prompt_logprobs},
   'not asked: no prompt_logprobs');
is($r3->{choices}[0]{text}, $plain->{choices}[0]{text},
   'the same completion as without');
is($r3->{usage}{completion_tokens}, 3, 'usage: the completion\'s tokens');
is($r3->{usage}{prompt_tokens}, $np, 'and the prompt\'s');
is($l3->[1]{ $ids[1] }{decoded_token},
   $t->request(POST => '/v1/detokenize',
               $J->encode({ tokens => [ $ids[1] ] }))->{json}{prompt},
   'decoded_token: the token\'s text alone');

my $r0 = $t->json_ok($t->completion(prompt => $prompt, max_tokens => 1,
                                prompt_logprobs => 0, %greedy),
                 'prompt_logprobs 0');
is(shape_problem($r0->{choices}[0]{prompt_logprobs}, \@ids, 0), '',
   'prompt_logprobs 0: the prompt\'s own token alone at each position');

# ---- the values: the echo with logprobs path's --------------------------------

my $echo = $t->json_ok($t->completion(prompt => $prompt, max_tokens => 3,
                                  logprobs => 3, echo => JSON::PP::true,
                                  %greedy), 'echo with logprobs 3');
my $elp = $echo->{choices}[0]{logprobs};
is_deeply([ map { $l3->[$_]{ $ids[$_] }{logprob} } 1 .. $np - 1 ],
          [ @{ $elp->{token_logprobs} }[1 .. $np - 1] ],
          'each prompt token\'s logprob is echo\'s');
# echo's top_logprobs are keyed by text: of tokens of the same text, the
# likelier one's
sub by_text {
    my ($pos, $k) = @_;
    my %h;
    for my $e (sort { $a->{rank} <=> $b->{rank} }
               grep { $_->{rank} <= $k } values %$pos) {
        $h{ $e->{decoded_token} } //= $e->{logprob};
    }
    return \%h;
}
is_deeply([ map { by_text($l3->[$_], 3) } 1 .. $np - 1 ],
          [ @{ $elp->{top_logprobs} }[1 .. $np - 1] ],
          'and its top 3 are echo\'s top_logprobs');
is_deeply($echo->{choices}[0]{prompt_logprobs}, $l3,
          'echo with logprobs carries the same list, as vLLM does');

# echo with logprobs 1 and prompt_logprobs 4: each gets its own count
my $both = $t->json_ok($t->completion(prompt => $prompt, max_tokens => 1,
                                  logprobs => 1, echo => JSON::PP::true,
                                  prompt_logprobs => 4, %greedy),
                   'echo with logprobs 1, prompt_logprobs 4');
is(shape_problem($both->{choices}[0]{prompt_logprobs}, \@ids, 4), '',
   'the list has the top 4');
is(scalar(grep { ref $_ eq 'HASH' && keys %$_ == 1 }
          @{ $both->{choices}[0]{logprobs}{top_logprobs} }[1 .. $np - 1]),
   $np - 1, 'echo\'s top_logprobs the top 1');

# ranks: the same whatever k; within the top, the place in it
my $r20 = $t->json_ok($t->completion(prompt => $prompt, max_tokens => 1,
                                 prompt_logprobs => 20, %greedy),
                  'prompt_logprobs 20');
my $l20 = $r20->{choices}[0]{prompt_logprobs};
is(shape_problem($l20, \@ids, 20), '', 'the top 20');
is_deeply([ map { $l20->[$_]{ $ids[$_] }{rank} } 1 .. $np - 1 ],
          [ map { $r0->{choices}[0]{prompt_logprobs}[$_]{ $ids[$_] }{rank} }
            1 .. $np - 1 ],
          'each prompt token\'s rank is the same with 20 and with 0');
ok(!grep({ $l20->[$_]{ $ids[$_] }{rank} > 20
           && $l20->[$_]{ $ids[$_] }{logprob}
              >= (sort { $a <=> $b } map { $_->{logprob} }
                  values %{ $l20->[$_] })[1] } 1 .. $np - 1),
   'a token ranked past 20 is less likely than every top 20 entry');

# ---- chat: one list beside the choices -----------------------------------------

my $messages = [ { role => 'user', content => 'Hello there' } ];
my $c = $t->request(POST => '/v1/tokenize',
                    $J->encode({ messages => $messages }))->{json};
my $cr = $t->json_ok(chat(messages => $messages, max_tokens => 2,
                      prompt_logprobs => 2, %greedy), 'chat');
is(shape_problem($cr->{prompt_logprobs}, $c->{tokens}, 2), '',
   'chat: the rendered prompt\'s list beside the choices');
ok(!exists $cr->{choices}[0]{prompt_logprobs}, 'and none in the choice');
my $cl = $t->json_ok(chat(messages => $messages, max_tokens => 2,
                      logprobs => JSON::PP::true, top_logprobs => 1,
                      prompt_logprobs => 2, %greedy),
                 'chat with logprobs too');
is_deeply($cl->{prompt_logprobs}, $cr->{prompt_logprobs},
          'the same list with the completion\'s logprobs asked');
is(scalar @{ $cl->{choices}[0]{logprobs}{content} }, 2,
   'and those cover the completion alone');

# ---- n 2, batched prompts, a prompt of many records ---------------------------

my $two = $t->json_ok($t->completion(prompt => $prompt, max_tokens => 2, n => 2,
                                 temperature => 1, seed => 5,
                                 prompt_logprobs => 3),
                  'n 2');
is_deeply([ map { $_->{prompt_logprobs} } @{ $two->{choices} } ], [ $l3, $l3 ],
          'n 2: each choice carries the prompt\'s list');

my $best = $t->json_ok($t->completion(prompt => $prompt, max_tokens => 2, n => 2,
                                  best_of => 3, temperature => 1, seed => 5,
                                  prompt_logprobs => 3),
                  'best_of 3, n 2');
is_deeply([ map { $_->{prompt_logprobs} } @{ $best->{choices} } ],
          [ $l3, $l3 ], 'best_of 3: each choice returned carries the list');

my @prompts = ('The sea', $prompt);
my $batch = $t->json_ok($t->completion(prompt => \@prompts, max_tokens => 1,
                                   n => 2, prompt_logprobs => 3, %greedy),
                    'batched prompts');
my @bc = sort { $a->{index} <=> $b->{index} } @{ $batch->{choices} };
my @ids0 = @{ $t->token_ids($prompts[0]) };
is(shape_problem($bc[0]{prompt_logprobs}, \@ids0, 3), '',
   'batched: the first prompt\'s choices its list');
is_deeply($bc[1]{prompt_logprobs}, $bc[0]{prompt_logprobs},
          'both of them');
is_deeply([ $bc[2]{prompt_logprobs}, $bc[3]{prompt_logprobs} ], [ $l3, $l3 ],
          'batched: the second prompt\'s choices its own');

my @long = map { 1 + ($_ * 37) % 400 } 1 .. 600;
my $lr = $t->json_ok($t->completion(prompt => \@long, max_tokens => 1,
                                prompt_logprobs => 20, %greedy),
                 '600-token prompt, prompt_logprobs 20');
my $ll = $lr->{choices}[0]{prompt_logprobs};
is(shape_problem($ll, \@long, 20), '',
   '600 positions, over many records, each in shape');
my $le = $t->json_ok($t->completion(prompt => \@long, max_tokens => 1,
                                logprobs => 1, echo => JSON::PP::true,
                                %greedy), 'the same prompt, echo');
is_deeply([ map { $ll->[$_]{ $long[$_] }{logprob} } 1 .. 599 ],
          [ @{ $le->{choices}[0]{logprobs}{token_logprobs} }[1 .. 599] ],
          'its logprobs are echo\'s at every position');

# ---- the openai npm client -------------------------------------------------------

my $node = abs_path("$root/t/node");
my $url = 'http://127.0.0.1:' . $t->port . '/v1';
my $model = $t->request(GET => '/v1/models')->{json}{data}[0]{id};
my $out = `node $node/prompt-logprobs-client.mjs $node $url $model '$prompt' 2>&1`;
my $o = eval { $J->decode($out) };
ok($o, 'the openai client ran') or diag($out);
$o //= {};
is(shape_problem($o->{completion}{choices}[0]{prompt_logprobs}, \@ids, 3), '',
   'openai client: the completion\'s list');
is_deeply($o->{completion}{choices}[0]{prompt_logprobs}, $l3,
          'the same as over plain HTTP');
cmp_ok(scalar @{ $o->{chat}{prompt_logprobs} // [] }, '>', 1,
       'openai client: the chat answer\'s list');
is_deeply($o->{stream_error},
          { status => 400, param => 'prompt_logprobs',
            message => '`prompt_logprobs` are not available when '
                       . '`stream=True`.' },
          'openai client: a stream with prompt_logprobs 2 refused');

# ---- bad values --------------------------------------------------------------------

sub refused {
    my ($r, $why, $name) = @_;
    is($r->{status}, 400, "$name: 400") or diag($r->{body});
    is($r->{json}{error}{param}, 'prompt_logprobs', "$name: names the field")
        unless $why =~ /beam/;
    like($r->{json}{error}{message} // '', $why, "$name: says why");
}

for my $ep ('/v1/completions', '/v1/chat/completions') {
    my $base = $ep =~ /chat/ ? '"messages":[{"role":"user","content":"x"}]'
                             : '"prompt":"x"';
    my %bad = ('-2' => qr/must be a positive value or -1/,
               '-1' => qr/of -1 \(the whole vocabulary\), which is greater than max allowed: 20/,
               '21' => qr/of 21, which is greater than max allowed: 20/,
               '"3"' => qr/must be an integer/,
               '1.5' => qr/must be an integer/,
               'true' => qr/must be an integer/,
               '[2]' => qr/must be an integer/);
    for my $v (sort keys %bad) {
        refused($t->request(POST => $ep,
                            "{$base,\"max_tokens\":1,\"prompt_logprobs\":$v}"),
                $bad{$v}, "$ep prompt_logprobs $v");
    }
    refused($t->request(POST => $ep, "{$base,\"max_tokens\":1,\"stream\":true,"
                                     . '"prompt_logprobs":1}'),
            qr/^`prompt_logprobs` are not available when `stream=True`\.$/,
            "$ep stream with prompt_logprobs 1");

    my $z = $t->request(POST => $ep, "{$base,\"max_tokens\":1,\"stream\":true,"
                                     . '"prompt_logprobs":0}');
    is($z->{status}, 200, "$ep stream with prompt_logprobs 0: accepted, "
                          . 'as vLLM does');
    unlike($z->{body}, qr/prompt_logprobs/, 'and no list is streamed');

    for my $ok ('null', '2.0') {
        my $r = $t->request(POST => $ep,
                            "{$base,\"max_tokens\":1,\"prompt_logprobs\":$ok}");
        is($r->{status}, 200, "$ep prompt_logprobs $ok accepted")
            or diag($r->{body});
    }
}
refused($t->completion(prompt => 'x', max_tokens => 1, best_of => 2,
                       use_beam_search => JSON::PP::true,
                       prompt_logprobs => 1),
        qr/prompt logprobs are not supported with beam search/,
        'beam search with prompt_logprobs');

# ---- nothing kept -------------------------------------------------------------------

my $idle = $t->wait_status(sub {
    $_[0]{requests}{running} == 0 && $_[0]{requests}{waiting} == 0
        && $_[0]{kv_blocks}{used} == 0 }, 10);
is($idle->{json}{kv_blocks}{used}, 0, 'every KV block back after all this');

$t->finish;
done_testing();
