#!/usr/bin/perl
# The entries of logprobs on the trained model (models/kjv-small), whose
# tokenizer has a token per byte and chat special tokens:
#
#   - completions: each top_logprobs entry holds the `logprobs` most
#     likely tokens and always the chosen one (OpenAI's legacy rule), so
#     logprobs 0 gives the chosen token alone; echoed prompt tokens too,
#     the first one's null;
#   - every token is shown by its own bytes: chat's `bytes` are exactly
#     the token's (a byte of a character split over tokens is that one
#     byte), `token` (and completions' `tokens` and keys) those bytes as
#     UTF-8, a part of a character as U+FFFD; special tokens by name;
#   - text_offset is where each token's text begins in the text: the
#     tokens that share a character all have that character's offset;
#   - a stop string that cuts a token leaves that token listed whole (its
#     logprob is the whole token's), a token wholly after the cut is not
#     listed; streamed or not.

use strict;
use warnings;

use lib 't/lib';
use Cwd qw(abs_path);
use Encode ();
use File::Basename qw(dirname);
use JSON::PP;
use Test::More;

use PagedLLM::Test;

binmode(Test::More->builder->$_, ':utf8')
    for qw(output failure_output todo_output);

my $J = $PagedLLM::Test::JSON;
my $T = JSON::PP::true;
my $root = abs_path(dirname(__FILE__) . '/..');
my $t = PagedLLM::Test->new(model => "$root/models/kjv-small")->start;

my $FFFD = "\x{FFFD}";
my $EMOJI = "\x{1F600}";
my @EMOJI_BYTES = (240, 159, 152, 128);

my %greedy = (temperature => 0);

sub completion_ok {
    my ($name, %req) = @_;
    return $t->json_ok($t->completion(%req), $name)->{choices}[0];
}

sub chat_ok {
    my ($name, %req) = @_;
    my $r = $t->request(POST => '/v1/chat/completions', $J->encode({
        messages => [ { role => 'user', content => 'hi' } ], %req }));
    return $t->json_ok($r, $name)->{choices}[0];
}

# The indexes i of completions logprobs $lp whose top_logprobs entry does
# not hold tokens[i] with token_logprobs[i], or holds more than $most.
sub tops_without_chosen {
    my ($lp, $most, $from) = @_;
    return grep {
        my $top = $lp->{top_logprobs}[$_];
        !(ref $top eq 'HASH' && keys(%$top) <= $most
          && exists $top->{ $lp->{tokens}[$_] }
          && $top->{ $lp->{tokens}[$_] } == $lp->{token_logprobs}[$_])
    } ($from // 0) .. $#{ $lp->{tokens} };
}

# Whether a chat entry's token is its bytes as UTF-8, U+FFFD for bytes
# that are not (a part of a character).
sub shows_its_bytes {
    my ($e) = @_;
    my $text = pack('C*', @{ $e->{bytes} });
    return utf8::decode($text) ? $text eq $e->{token}
                               : $e->{token} =~ /\x{FFFD}/;
}

# ---- completions: top_logprobs hold the chosen token ------------------------

my $hot = completion_ok('logprobs 1 at temperature 2',
                        prompt => 'In the beginning', max_tokens => 6,
                        logprobs => 1, temperature => 2, seed => 3);
my $lp = $hot->{logprobs};
is_deeply([ tops_without_chosen($lp, 2) ], [],
          'logprobs 1: each entry holds the chosen token, at most 2 in all');
my @below = grep {
    my $top = $lp->{top_logprobs}[$_];
    keys %$top == 2
        && (sort { $b <=> $a } values %$top)[0] > $lp->{token_logprobs}[$_]
} 0 .. 5;
ok(@below >= 1, 'a token sampled below the likeliest comes with it: '
                . scalar(@below) . ' of 6');

my $zero = completion_ok('logprobs 0', prompt => 'In the beginning',
                         max_tokens => 3, logprobs => 0, temperature => 2,
                         seed => 3);
is_deeply($zero->{logprobs}{top_logprobs},
          [ map { { $zero->{logprobs}{tokens}[$_]
                    => $zero->{logprobs}{token_logprobs}[$_] } } 0 .. 2 ],
          'logprobs 0: each entry is the chosen token alone');

my $three = completion_ok('logprobs 3, greedy', prompt => 'In the beginning',
                          max_tokens => 6, logprobs => 3, %greedy);
is_deeply([ tops_without_chosen($three->{logprobs}, 3) ], [],
          'greedy: the chosen token is among the 3, nothing more');

my $echo = completion_ok('echo with logprobs 1',
                         prompt => 'In the beginning', max_tokens => 2,
                         logprobs => 1, echo => $T, %greedy);
$lp = $echo->{logprobs};
is($lp->{tokens}[0], '<|begin_of_text|>',
   'echo: the first prompt token by its name');
ok(!defined $lp->{token_logprobs}[0] && !defined $lp->{top_logprobs}[0],
   'echo: its logprob and top_logprobs null');
is_deeply([ tops_without_chosen($lp, 2, 1) ], [],
          'echo: every later prompt token in its own entry');
is($lp->{tokens}[1], 'In', 'echo: "In" second');
is(scalar keys %{ $lp->{top_logprobs}[1] }, 2,
   'echo: "In" beside the likeliest token there, which is not "In"');

my $s = $t->stream_json('/v1/completions', prompt => 'In the beginning',
                        max_tokens => 6, logprobs => 1, temperature => 2,
                        seed => 3);
my @slp = map { $_->{choices}[0]{logprobs} }
          grep { @{ $_->{choices} } && $_->{choices}[0]{logprobs} }
          @{ $s->{events} };
is_deeply([ map { [ tops_without_chosen($_, 2) ] } @slp ],
          [ map { [] } @slp ], 'streamed: each event\'s entry too');
is_deeply([ map { @{ $_->{top_logprobs} } } @slp ],
          $hot->{logprobs}{top_logprobs}, 'streamed: the same entries');

# ---- tokens that are parts of a character ----------------------------------

my $c = chat_ok('chat, guided to a choice with an emoji',
                guided_choice => ["ab${EMOJI}cd"], max_tokens => 12,
                logprobs => $T, top_logprobs => 2);
my $content = $c->{logprobs}{content};
is($c->{message}{content}, "ab${EMOJI}cd", 'the content');
my @emoji = grep { @{ $_->{bytes} } == 1 && $_->{bytes}[0] >= 128 }
            @$content;
is_deeply([ map { @{ $_->{bytes} } } @emoji ], \@EMOJI_BYTES,
          'chat: the emoji\'s four byte tokens, each with its own byte');
is_deeply([ map { $_->{token} } @emoji ], [ ($FFFD) x 4 ],
          'chat: each shown as U+FFFD, a part of a character');
is_deeply([ map { @{ $_->{bytes} } } @$content[0 .. $#$content - 1] ],
          [ unpack('C*', Encode::encode('UTF-8', "ab${EMOJI}cd")) ],
          'chat: the entries\' bytes are the content\'s');
is($content->[-1]{token}, '<|eot_id|>',
   'chat: the token that ended the answer, by its name');
is_deeply($content->[-1]{bytes}, [ unpack('C*', '<|eot_id|>') ],
          'chat: with the bytes of its name');
is(scalar(grep { !shows_its_bytes($_) }
          map { @{ $_->{top_logprobs} } } @$content), 0,
   'chat: each top entry\'s token is its bytes\' text');

my $stream = $t->stream_json('/v1/chat/completions',
                             messages => [ { role => 'user',
                                             content => 'hi' } ],
                             guided_choice => ["ab${EMOJI}cd"],
                             max_tokens => 12, logprobs => $T,
                             top_logprobs => 2);
is_deeply([ map { @{ $_->{choices}[0]{logprobs}{content} } }
            grep { @{ $_->{choices} } && $_->{choices}[0]{logprobs} }
            @{ $stream->{events} } ], $content,
          'chat streamed: the same entries');

my $bias = chat_ok('chat, logit_bias on the byte 0xF0',
                   logit_bias => { 240 => 100 }, max_tokens => 1,
                   logprobs => $T);
is_deeply($bias->{logprobs}{content}[0]{bytes}, [240],
          'a lone lead byte: its byte, not U+FFFD\'s');
is($bias->{logprobs}{content}[0]{token}, $FFFD, 'shown as U+FFFD');
is($bias->{message}{content}, $FFFD, 'as the content ends with it');

my $g = completion_ok('completions, guided to the emoji choice',
                      prompt => 'In the beginning',
                      guided_choice => ["ab${EMOJI}cd"], max_tokens => 12,
                      logprobs => 0);
$lp = $g->{logprobs};
is($g->{text}, "ab${EMOJI}cd", 'the text');
my @at = grep { $lp->{tokens}[$_] eq $FFFD } 0 .. $#{ $lp->{tokens} };
is(scalar @at, 4, 'completions: the emoji\'s tokens are U+FFFD each');
is_deeply([ @{ $lp->{text_offset} }[@at] ], [ 2, 2, 2, 2 ],
          'completions: all at the emoji\'s offset');
is_deeply([ @{ $lp->{text_offset} }[ $at[-1] + 1, $at[-1] + 2 ] ], [ 3, 4 ],
          'completions: the characters after it one by one');
is_deeply([ tops_without_chosen($lp, 1) ], [],
          'completions: keyed by the same U+FFFD');
$s = $t->stream_json('/v1/completions', prompt => 'In the beginning',
                     guided_choice => ["ab${EMOJI}cd"], max_tokens => 12,
                     logprobs => 0);
is_deeply([ map { @{ $_->{choices}[0]{logprobs}{text_offset} } }
            grep { @{ $_->{choices} } && $_->{choices}[0]{logprobs} }
            @{ $s->{events} } ], $lp->{text_offset},
          'completions streamed: the same offsets');

# ---- stop strings that cut a token ------------------------------------------

my %heaven = (prompt => 'In the beginning God created', max_tokens => 4,
              logprobs => 1, %greedy);
my $base = completion_ok('the continuation', %heaven)->{logprobs};
is_deeply([ @{ $base->{tokens} }[0, 1] ], [ ' the', ' heaven' ],
          'the continuation: " the", " heaven"');

my $cut = completion_ok('stop inside " heaven"', %heaven, stop => ['heav']);
is($cut->{text}, ' the ', 'the text ends before the stop string');
is_deeply($cut->{logprobs}{tokens}, [ ' the', ' heaven' ],
          'the token cut by it listed whole');
is_deeply($cut->{logprobs}{token_logprobs},
          [ @{ $base->{token_logprobs} }[0, 1] ],
          'with the whole token\'s logprob');
is_deeply($cut->{logprobs}{top_logprobs},
          [ @{ $base->{top_logprobs} }[0, 1] ], 'and top_logprobs');
is_deeply($cut->{logprobs}{text_offset}, [ 0, 4 ],
          'at its offset in the text');

my $kept = completion_ok('stop inside " heaven", kept', %heaven,
                         stop => ['heav'],
                         include_stop_str_in_output => $T);
is($kept->{text}, ' the heav', 'include_stop_str_in_output: text to its end');
is_deeply($kept->{logprobs}{tokens}, [ ' the', ' heaven' ],
          'the token listed whole');

my $after = completion_ok('stop at " heaven"', %heaven,
                          stop => [' heaven']);
is($after->{text}, ' the', 'a stop string that begins a token');
is_deeply($after->{logprobs}{tokens}, [' the'],
          'the token wholly after the cut not listed');

my $first = completion_ok('stop at the first token', %heaven,
                          stop => [' the']);
is($first->{text}, '', 'no text');
is_deeply($first->{logprobs}{tokens}, [], 'no token listed');

$s = $t->stream_json('/v1/completions', %heaven, stop => ['heav']);
my @ev = grep { @{ $_->{choices} } && $_->{choices}[0]{logprobs} }
         @{ $s->{events} };
is_deeply([ map { $_->{choices}[0]{logprobs}{tokens}[0] } @ev ],
          [ ' the', ' heaven' ], 'streamed: the cut token whole');
is_deeply([ map { $_->{choices}[0]{text} } @ev ], [ ' the', ' ' ],
          'streamed: its event\'s text cut');

my $chat = chat_ok('chat, greedy', max_tokens => 6, logprobs => $T,
                   %greedy);
my @words = map { $_->{token} } @{ $chat->{logprobs}{content} };
my $word = $words[2];
ok(length $word >= 4, "chat: a third token of 4 characters or more: '$word'");
my $cc = chat_ok('chat, a stop string inside the third token',
                 max_tokens => 6, logprobs => $T, %greedy,
                 stop => [ substr($word, 2, 2) ]);
is($cc->{message}{content}, join('', @words[0, 1]) . substr($word, 0, 2),
   'chat: the content cut inside it');
is_deeply($cc->{logprobs}{content},
          [ @{ $chat->{logprobs}{content} }[0 .. 2] ],
          'chat: the token listed whole, with its bytes and logprob');

$t->finish;
done_testing();
