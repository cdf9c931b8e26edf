#!/usr/bin/perl
# The request fields read for their JSON type (issues 24 and 27): a value
# of the wrong type is a 400 naming the field; the values that ask for
# nothing, and OpenAI's parameters that mean nothing here, are accepted;
# what asks for a feature not here is a 400 naming it.  Then what the
# implemented vLLM extras do (truncate_prompt_tokens, add_generation_prompt
# and chat_template_kwargs on chat), logprobs 0, "usage": null on the
# chunks before the last with include_usage, a NUL in a prompt (refused
# in what the chat template renders), and JSON errors in our own words.

use strict;
use warnings;

use lib 't/lib';
use File::Copy qw(copy);
use File::Temp qw(tempdir);
use JSON::PP;
use Test::More;

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;

# the tiny model with a chat template that prints a "greeting" variable
# when the template's context has one
my $tiny = "$ENV{PAGEDLLM_BUILD}/models/tiny";
my $model = tempdir('pagedllm-fields-XXXXXX', TMPDIR => 1, CLEANUP => 1);
for my $f (qw(config.json generation_config.json model.safetensors)) {
    symlink("$tiny/$f", "$model/$f") or die "symlink $f: $!\n";
}
copy("$tiny/tokenizer.json", $model) or die "tokenizer.json: $!\n";
open my $in, '<', "$tiny/tokenizer_config.json" or die "config: $!\n";
my $cfg = $J->decode(do { local $/; <$in> });
$cfg->{chat_template} = '{%- if greeting is defined %}{{ greeting }}'
                      . "{%- endif %}$cfg->{chat_template}";
open my $out, '>', "$model/tokenizer_config.json" or die "config: $!\n";
print $out $J->encode($cfg);
close $out;

my $t = PagedLLM::Test->new(model => $model)->start;

my $MSGS = '[{"role":"user","content":"Say something."}]';

# a raw JSON body: each field's value is written as given
sub post { $t->post_fields(@_) }

sub refused {
    my ($r, $param, $name) = @_;
    ok($r->{status} == 400 && ($r->{json}{error}{param} // '') eq $param,
       "$name: 400 naming $param")
        or diag("status $r->{status}: $r->{body}");
    return $r->{json}{error}{message} // '';
}

sub accepted {
    my ($r, $name) = @_;
    is($r->{status}, 200, "$name: accepted") or diag($r->{body});
    return $r->{json};
}

# [chat?, field, value (JSON)]: a wrong type, or a value asking for what
# is not here
my @refused = (
    [1, tools => 'false'], [1, tools => '{}'], [1, tools => '""'],
    [1, tools => '[{"type":"function","function":{"name":"f","x":1}}]'],
    [1, tools => '[{"type":"function","function":{"name":"f g"}}]'],
    [1, tool_choice => 'false'], [1, tool_choice => '[]'],
    [1, tool_choice => '"required"'], [1, tool_choice => '"auto"'],
    [1, tool_choice => '{"type":"function","function":{"name":"f"}}'],
    [1, parallel_tool_calls => '"yes"'], [1, parallel_tool_calls => '{}'],
    [1, functions => '{}'], [1, function_call => '1'],
    [1, response_format => '{}'], [1, response_format => '""'],
    [1, response_format => '[]'], [1, response_format => 'false'],
    [1, response_format => '{"type":7}'],
    [1, response_format => '{"type":"json_foo"}'],
    [0, echo => '{}'], [0, echo => '""'], [0, echo => '0'],
    [0, suffix => '5'], [0, suffix => '"tail"'],
    [1, store => '"yes"'], [1, store => '1'],
    [1, metadata => '[]'], [1, metadata => '{"k":1}'],
    [1, metadata => '"k"'],
    [1, service_tier => 'true'], [1, service_tier => '{}'],
    [1, safety_identifier => '1'], [1, prompt_cache_key => '[]'],
    [0, store => 'true'], [0, metadata => '{}'], [0, service_tier => '"a"'],
    [1, prediction => '"text"'], [1, prediction => '[]'],
    [1, modalities => '"text"'], [1, modalities => '[1]'],
    [1, modalities => '["text","audio"]'], [1, modalities => '["audio"]'],
    [1, reasoning_effort => 'true'], [1, reasoning_effort => '{}'],
    [0, user => '5'], [1, user => '[]'],
    [1, max_completion_tokens => '"5"'], [1, max_completion_tokens => '0'],
    [0, include_stop_str_in_output => '1'],
    [1, skip_special_tokens => '"no"'], [0, skip_special_tokens => '1'],
    [0, spaces_between_special_tokens => '0'],
    [1, spaces_between_special_tokens => 'false'],
    [1, add_generation_prompt => '1'],
    [1, continue_final_message => '"x"'],
    [1, continue_final_message => 'true', add_generation_prompt => 'true'],
    [1, chat_template_kwargs => '[]'], [1, chat_template_kwargs => 'true'],
    [0, truncate_prompt_tokens => '0'], [0, truncate_prompt_tokens => '-2'],
    [1, truncate_prompt_tokens => '1.5'],
    [0, truncate_prompt_tokens => '"3"'],
    [1, web_search_options => '{}'], [1, audio => '{"voice":"alloy"}'],
    [1, verbosity => '"low"'],
);

for my $c (@refused) {
    my ($chat, $field, $v, @with) = @$c;
    refused(post($chat, $field => $v, @with), $field,
            ($chat ? 'chat' : 'completions') . " $field: $v @with");
}

# the values that ask for nothing, and no-ops
my @accepted = (
    [1, tools => '[]'], [1, tools => 'null'], [1, tool_choice => '"none"'],
    [1, tools => '[{"type":"function","function":{"name":"f"}}]'],
    [1, parallel_tool_calls => 'true'],
    [1, parallel_tool_calls => 'false'], [1, functions => '[]'],
    [1, function_call => '"none"'],
    [1, response_format => '{"type":"text"}'], [1, response_format => 'null'],
    [0, echo => 'false'], [0, suffix => '""'],
    [1, store => 'true'], [1, store => 'false'],
    [1, metadata => '{"k":"v"}'], [1, metadata => '{}'],
    [1, service_tier => '"auto"'], [1, service_tier => '"default"'],
    [1, safety_identifier => '"s"'], [1, prompt_cache_key => '"k"'],
    [1, prediction => '{"type":"content","content":"x"}'],
    [1, modalities => '["text"]'], [1, modalities => '[]'],
    [1, reasoning_effort => '"low"'], [0, user => '"u"'], [1, user => '"u"'],
    [1, max_completion_tokens => '3'],
    [0, include_stop_str_in_output => 'false'],
    [1, skip_special_tokens => 'true'],
    [0, spaces_between_special_tokens => 'true'],
    [1, continue_final_message => 'false'],
    [1, chat_template_kwargs => '{}'],
    [0, truncate_prompt_tokens => '-1'],
);

for my $c (@accepted) {
    my ($chat, $field, $v) = @$c;
    accepted(post($chat, $field => $v),
             ($chat ? 'chat' : 'completions') . " $field: $v");
}

# ---- what the implemented extras do ----

my $r = accepted(post(1, max_completion_tokens => 3, max_tokens => 'null',
                      ignore_eos => 'true'),
                 'max_completion_tokens 3');
is($r->{usage}{completion_tokens}, 3, 'max_completion_tokens is max_tokens');

$r = accepted(post(0, prompt => '[1,2,3,4,5]', truncate_prompt_tokens => 2),
              'truncate_prompt_tokens 2 on ids');
is($r->{usage}{prompt_tokens}, 2, 'the prompt keeps its last 2 ids');
my $whole = post(0, prompt => '"one two three four five"')->{json};
cmp_ok($whole->{usage}{prompt_tokens}, '>', 3, 'a text prompt of 4+ tokens');
$r = accepted(post(0, prompt => '"one two three four five"',
                   truncate_prompt_tokens => 3), 'truncate_prompt_tokens 3');
is($r->{usage}{prompt_tokens}, 3, 'the text prompt keeps 3 tokens');
$r = accepted(post(0, prompt => '[1,2]', truncate_prompt_tokens => 9),
              'truncate_prompt_tokens above the prompt');
is($r->{usage}{prompt_tokens}, 2, 'a shorter prompt is whole');
$r = accepted(post(1, truncate_prompt_tokens => 2), 'chat truncated');
is($r->{usage}{prompt_tokens}, 2, 'the chat prompt keeps 2 tokens');

my $with = post(1)->{json}{usage}{prompt_tokens};
$r = accepted(post(1, add_generation_prompt => 'false'),
              'add_generation_prompt false');
cmp_ok($r->{usage}{prompt_tokens}, '<', $with,
       'without the generation prompt the prompt is shorter');
$r = accepted(post(1, add_generation_prompt => 'true'),
              'add_generation_prompt true');
is($r->{usage}{prompt_tokens}, $with, 'true is the default');

$r = accepted(post(1, chat_template_kwargs => '{"greeting":"Hello there"}'),
              'chat_template_kwargs');
cmp_ok($r->{usage}{prompt_tokens}, '>', $with,
       'chat_template_kwargs reach the template');
$r = accepted(post(1, chat_template_kwargs => '{"add_generation_prompt":false}'),
              'chat_template_kwargs naming a variable of ours');
is($r->{usage}{prompt_tokens}, $with, 'cannot override add_generation_prompt');
refused(post(1, chat_template_kwargs => '{"greeting":"<|end_of_text|>"}'),
        'chat_template_kwargs', 'special token text in chat_template_kwargs');
refused(post(1, chat_template_kwargs => '{"a":["<|end_of_text|>"]}'),
        'chat_template_kwargs', 'special token text nested in one');

# include_stop_str_in_output: the text ends after the stop string; a stop
# string is taken from the middle of a greedy output
my %greedy = (temperature => 0, max_tokens => 12, ignore_eos => 'true');
my $full = post(0, %greedy)->{json}{choices}[0]{text} // '';
my ($at, $stop);
for my $i (2 .. length($full) - 3) {
    my $s = substr($full, $i, 2);
    next if index($full, $s) < $i || $s =~ /["\\\x00-\x1f]/;
    ($at, $stop) = ($i, $s);
    last;
}
ok(defined $stop, 'a stop string in the middle of the output')
    or diag("output: $full");
$stop //= 'zz';
$at //= 0;
my $js = $J->encode($stop);
$r = accepted(post(0, %greedy, stop => $js), 'the stop string');
is($r->{choices}[0]{text}, substr($full, 0, $at), 'cut before it');
$r = accepted(post(0, %greedy, stop => $js,
                   include_stop_str_in_output => 'true'),
              'include_stop_str_in_output true');
is($r->{choices}[0]{text}, substr($full, 0, $at + 2), 'cut after it');
is($r->{choices}[0]{finish_reason}, 'stop', 'finish_reason stop');
my $s = $t->stream_json('/v1/completions', prompt => 'Hi', stop => $stop,
                        temperature => 0, max_tokens => 12,
                        ignore_eos => JSON::PP::true,
                        include_stop_str_in_output => JSON::PP::true);
is(join('', map { $_->{choices}[0]{text} // '' } @{ $s->{events} }),
   substr($full, 0, $at + 2), 'streamed: the same text');

# continue_final_message: the prompt ends with the last message's content
# (the template writes "<assistant>\n" + content | trim + "\n")
my $tok = $t->request(POST => '/v1/tokenize', $J->encode(
    { prompt => "<user>\nSay something.\n<assistant>\nOnce upon a" }));
is($tok->{status}, 200, 'the expected prompt tokenized');
for my $content ('Once upon a', 'Once upon a ') {
    my $msgs = $J->encode([{ role => 'user', content => 'Say something.' },
                           { role => 'assistant', content => $content }]);
    $r = accepted(post(1, messages => $msgs,
                       continue_final_message => 'true'),
                  "continue_final_message, content \"$content\"");
    is($r->{usage}{prompt_tokens}, $tok->{json}{count},
       'the prompt ends with the final message\'s content');
    $r = accepted(post(1, messages => $msgs,
                       add_generation_prompt => 'false'),
                  'the same without continue_final_message');
    cmp_ok($r->{usage}{prompt_tokens}, '>', $tok->{json}{count},
           'the message is closed');
}

# skip_special_tokens false keeps the special tokens' text: the bias makes
# <|begin_of_text|> (id 510, no stop token) the greedy choice
my %bos = (logit_bias => '{"510":100}', temperature => 0, max_tokens => 2);
$r = accepted(post(0, %bos), 'a special token generated');
is($r->{choices}[0]{text}, '', 'its text left out by default');
$r = accepted(post(0, %bos, skip_special_tokens => 'false'),
              'skip_special_tokens false');
is($r->{choices}[0]{text}, '<|begin_of_text|><|begin_of_text|>',
   'the special tokens\' text kept');
$r = accepted(post(1, %bos, skip_special_tokens => 'false'),
              'chat skip_special_tokens false');
is($r->{choices}[0]{message}{content}, '<|begin_of_text|><|begin_of_text|>',
   'on chat too');

# logprobs 0: the sampled token's logprob, no alternatives
$r = accepted(post(0, logprobs => 0, max_tokens => 3, ignore_eos => 'true'),
              'logprobs 0');
my $lp = $r->{choices}[0]{logprobs} // {};
is(scalar @{ $lp->{token_logprobs} // [] }, 3, 'a logprob per token');
ok(!grep({ !defined || $_ > 0 } @{ $lp->{token_logprobs} // [] }),
   'each one a log probability');
ok(!grep({ defined && %$_ } @{ $lp->{top_logprobs} // [] }),
   'and no alternatives');

# stream_options.include_usage: "usage": null on every chunk but the last
for my $chat (0, 1) {
    my $what = $chat ? 'chat' : 'completions';
    my %req = (max_tokens => 3, ignore_eos => JSON::PP::true,
               $chat ? (messages => $J->decode($MSGS)) : (prompt => 'Hi'));
    my $path = $chat ? '/v1/chat/completions' : '/v1/completions';
    my $s = $t->stream_json($path, %req,
                            stream_options => { include_usage => JSON::PP::true });
    my @ev = @{ $s->{events} };
    ok($s->{done} && @ev >= 4, "$what with include_usage: streamed");
    my $last = pop @ev;
    is($last->{usage}{completion_tokens}, 3, "$what: the last has the usage");
    ok(!grep({ !exists $_->{usage} || defined $_->{usage} } @ev),
       "$what: every other chunk has \"usage\": null");
    $s = $t->stream_json($path, %req);
    ok(!grep({ exists $_->{usage} } @{ $s->{events} }),
       "$what without include_usage: no usage key");
}

# a NUL in a prompt is text like any other
$r = accepted(post(0, prompt => '"a\u0000b"'), 'a NUL in a prompt');
my $ab = post(0, prompt => '"ab"')->{json}{usage}{prompt_tokens};
cmp_ok($r->{usage}{prompt_tokens}, '>', $ab, 'the NUL is a token');
# the chat template renders C strings: a NUL there would end the prompt
refused(post(1, messages => '[{"role":"user","content":"a\u0000b"}]'),
        'messages', 'a NUL in a message');
refused(post(1, messages => '[{"role":"user\u0000x","content":"a"}]'),
        'messages', 'a NUL in a role');
refused(post(1, chat_template_kwargs => '{"greeting":"a\u0000b"}'),
        'chat_template_kwargs', 'a NUL in chat_template_kwargs');

# JSON errors in our own words, not the JSON library's
for my $bad (['{"prompt":"x",}', qr/not valid JSON/, 'a trailing comma'],
             ['{"prompt":"x"} 5', qr/more follows the JSON value/,
              'data after the value'],
             ['{"prompt":"x"', qr/ends inside the JSON value/,
              'a body cut short'],
             ['{"prompt":"x","prompt":"y"}', qr/same key twice/,
              'a duplicate key'],
             ['{"prompt":"x","a\u0000":1}', qr/key holds U\+0000/,
              'a NUL in a key']) {
    my ($body, $re, $name) = @$bad;
    $r = $t->request(POST => '/v1/completions', $body);
    is($r->{status}, 400, "$name: 400");
    like($r->{json}{error}{message} // '', $re, "$name: in our words");
    unlike($r->{json}{error}{message} // '',
           qr/expected|near|unexpected|duplicate object key|end of file/,
           "$name: not jansson's text");
}

$t->finish;
done_testing;
