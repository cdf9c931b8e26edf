#!/usr/bin/perl
# Every documented parameter of /v1/completions and /v1/chat/completions
# and vLLM's extra parameters (issue 24 item 3), one case or more per row
# of README's table that t/53-fields.t does not already cover: echo
# (whole, streamed, with n, with a prompt of token ids, with logprobs),
# a list of one prompt, max_completion_tokens, user, add_special_tokens,
# and each parameter refused with its reason or accepted with its
# neutral value.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $t = PagedLLM::Test->new->start;

# a raw JSON body: each field's value written as given
sub post { $t->post_fields(@_) }

sub refused {
    my ($r, $param, $name, $why) = @_;
    my $e = ($r->{json} // {})->{error} // {};
    ok($r->{status} == 400 && ($e->{param} // '') eq $param
       && (!defined $why || ($e->{message} // '') =~ $why),
       "$name: 400 naming $param" . (defined $why ? ", saying why" : ''))
        or diag("status $r->{status}: $r->{body}");
}

sub accepted {
    my ($r, $name) = @_;
    is($r->{status}, 200, "$name: accepted") or diag($r->{body});
    return $r->{json} // {};
}

sub texts { [ map { $_->{text} } @{ $_[0]{choices} // [] } ] }

# ---- echo ---------------------------------------------------------------

my %greedy = (max_tokens => 6, temperature => 0, ignore_eos => 'true');
my $plain = accepted(post(0, prompt => '"Once upon"', %greedy), 'no echo');
my $echo = accepted(post(0, prompt => '"Once upon"', echo => 'true',
                         %greedy), 'echo');
is($echo->{choices}[0]{text}, 'Once upon' . $plain->{choices}[0]{text},
   'echo: the prompt, then the same completion');
is($echo->{usage}{completion_tokens}, $plain->{usage}{completion_tokens},
   'echo: usage counts the completion alone');
is_deeply(texts(accepted(post(0, prompt => '"Once upon"', echo => 'false',
                              %greedy), 'echo false')),
          texts($plain), 'echo false: the completion alone');

my $two = accepted(post(0, prompt => '"Once upon"', echo => 'true', n => 2,
                        seed => 7, max_tokens => 4, ignore_eos => 'true'),
                   'echo with n 2');
is(scalar(grep { index($_, 'Once upon') == 0 } @{ texts($two) }), 2,
   'echo with n 2: each choice begins with the prompt');

# a prompt of ids: the ids decoded, special tokens included
my $tok = $t->request(POST => '/v1/tokenize',
                      $J->encode({ prompt => 'Once upon' }))->{json};
my $ids = $J->encode($tok->{tokens});
my $decoded = $t->request(POST => '/v1/detokenize',
                          $J->encode({ tokens => $tok->{tokens} }))->{json};
my $by_ids = accepted(post(0, prompt => $ids, echo => 'true', %greedy),
                      'echo of a prompt of ids');
is($by_ids->{choices}[0]{text},
   $decoded->{prompt} . $plain->{choices}[0]{text},
   'echo of ids: the ids decoded (BOS included), then the completion');

# streamed: the prompt first, in its own event, for every choice
my $s = $t->stream_json('/v1/completions', prompt => 'Once upon',
                        echo => JSON::PP::true, n => 2, seed => 7,
                        max_tokens => 4, ignore_eos => JSON::PP::true);
my (%first, %all);
for my $ev (@{ $s->{events} // [] }) {
    next unless ref $ev eq 'HASH';
    for my $c (@{ $ev->{choices} // [] }) {
        $first{$c->{index}} //= $c->{text};
        $all{$c->{index}} .= $c->{text};
    }
}
is_deeply(\%first, { 0 => 'Once upon', 1 => 'Once upon' },
          'streamed echo: each choice\'s first event is the prompt');
is_deeply([ @all{0, 1} ], texts($two),
          'streamed echo: the same text as the whole answer');

my $elp = accepted(post(0, echo => 'true', logprobs => 1),
                   'echo with logprobs (t/69-batch-echo-logprobs.t)');
is(scalar @{ $elp->{choices}[0]{logprobs}{token_logprobs} },
   $elp->{usage}{prompt_tokens} + 2,
   'echo with logprobs: the prompt\'s tokens, then the two generated');
accepted(post(0, echo => 'true', logprobs => 'null'), 'echo, logprobs null');

# ---- a list of one prompt (batches of more: t/69-batch-echo.t) ----------

is(scalar @{ texts(accepted(post(0, prompt => '["Hi"]'),
                            'a list of one prompt')) }, 1,
   'a list of one prompt: one choice');
is(scalar @{ texts(accepted(post(0, prompt => '[[1,2]]'),
                            'a list of one id list')) }, 1,
   'a list of one id list: one choice');

# ---- implemented --------------------------------------------------------

my $mct = accepted(post(1, max_completion_tokens => 3, ignore_eos => 'true',
                        max_tokens => 'null'), 'max_completion_tokens 3');
is($mct->{usage}{completion_tokens}, 3,
   'max_completion_tokens: that many tokens');

accepted(post(0, user => '"u-1"'), 'completions user');
accepted(post(1, user => '"u-1"'), 'chat user');

my $with = accepted(post(0, prompt => '"Once upon"'), 'default specials');
my $without = accepted(post(0, prompt => '"Once upon"',
                            add_special_tokens => 'false'),
                       'add_special_tokens false');
is($without->{usage}{prompt_tokens}, $with->{usage}{prompt_tokens} - 1,
   'completions add_special_tokens false: no BOS');
my $chat = accepted(post(1), 'chat default specials');
my $chat_bos = accepted(post(1, add_special_tokens => 'true'),
                        'chat add_special_tokens true');
is($chat_bos->{usage}{prompt_tokens}, $chat->{usage}{prompt_tokens} + 1,
   'chat add_special_tokens true: a BOS before the template\'s text');
refused(post(0, add_special_tokens => '1'), 'add_special_tokens',
        'add_special_tokens 1');

# ---- no effect here: the neutral value accepted, another refused, why ---

# [chat?, field, accepted (JSON) or undef, refused (JSON), reason]
my @rows = (
    [2, priority => '0', '1', qr/first come, first served/],
    [2, allowed_token_ids => undef, '[1,2]', qr/allowed tokens/],
    [2, bad_words => '[]', '["x"]', qr/bad word/],
    [2, logits_processors => '[]', '["m.f"]', qr/no code/],
    [2, return_tokens_as_token_ids => 'false', 'true', qr/text/],
    [2, return_token_ids => 'false', 'true', qr/text/],
    [2, request_id => undef, '"r1"', qr/X-Request-Id/],
    [2, cache_salt => undef, '"s"', qr/salted/],
    [2, kv_transfer_params => undef, '{}', qr/disaggregated/],
    [2, vllm_xargs => '{}', '{"a":1}', qr/extra arguments/],
    [2, spaces_between_special_tokens => 'true', 'false', qr/spaces/],
    [0, suffix => '""', '"tail"', qr/fill-in-the-middle/],
    [0, prompt_embeds => undef, '"AAAA"', qr/embeddings/],
    [1, echo => 'false', 'true', qr/last message/],
    [1, documents => '[]', '[{"text":"d"}]', qr/documents/],
    [1, chat_template => undef, '"{{ 1 }}"', qr/chat template/],
    [1, mm_processor_kwargs => '{}', '{"a":1}', qr/text only/],
    [1, audio => undef, '{"voice":"alloy","format":"wav"}', qr/text only/],
    [1, web_search_options => undef, '{}', qr/web/],
    [1, verbosity => undef, '"low"', qr/verbosity/],
);

for my $row (@rows) {
    my ($where, $field, $ok, $bad, $why) = @$row;
    for my $chat ($where == 2 ? (0, 1) : ($where)) {
        my $ep = $chat ? 'chat' : 'completions';
        accepted(post($chat, $field => $ok), "$ep $field $ok") if defined $ok;
        accepted(post($chat, $field => 'null'), "$ep $field null");
        refused(post($chat, $field => $bad), $field, "$ep $field $bad", $why);
    }
}

$t->finish;
done_testing();
