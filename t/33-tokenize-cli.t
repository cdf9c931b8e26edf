#!/usr/bin/perl
# 33-tokenize-cli.t: pagedllm-tokenize on the bundled tiny model, and how
# it treats bad input: every bad line gets a clear message and a null
# result while the lines after it are still served; unsupported or
# malformed tokenizer files are refused with a message naming the part.
use strict;
use warnings;
use FindBin;
use File::Temp qw(tempdir);
use JSON::PP;
use Test::More;

my $root  = "$FindBin::Bin/..";
my $build = $ENV{PAGEDLLM_BUILD} // "$root/build";
my $cli   = "$build/pagedllm-tokenize";
my $tok   = "$build/models/tiny/tokenizer.json";
my $cfg   = "$build/models/tiny/tokenizer_config.json";
my $dir   = tempdir(CLEANUP => 1);

ok(-x $cli, 'pagedllm-tokenize is built') or BAIL_OUT('build first');
ok(-f $tok, 'tiny model tokenizer present') or BAIL_OUT('make model');

sub run {
    my ($args, $input) = @_;
    open(my $fh, '>:raw', "$dir/in") or die;
    print $fh $input;
    close $fh;
    my $out = qx{$cli $args < $dir/in 2> $dir/err};
    my $rc = $? >> 8;
    open($fh, '<:raw', "$dir/err") or die;
    my $err = do { local $/; <$fh> };
    return ($out, $err, $rc);
}

my ($out, $err, $rc) = run("--tokenizer $tok", qq{"Hello world"\n"a"\n});
my @lines = split /\n/, $out;
is(scalar(@lines), 2, 'one output line per input line');
like($lines[0], qr/^\[510,\d+(,\d+)*\]$/, 'ids start with the BOS template');
is($rc, 0, 'exit status 0');

($out) = run("--tokenizer $tok --no-special", qq{"Hello world"\n});
my ($ids) = $out =~ /^(\[.*\])$/;
($out) = run("--tokenizer $tok --decode", "$ids\n");
is($out, qq{"Hello world"\n}, 'decode gives the text back');

($out) = run("--tokenizer $tok --stream", "$ids\n");
my $pieces = JSON::PP->new->decode($out);
is(join('', @$pieces), 'Hello world', 'stream pieces join to the text');
is(scalar(@$pieces), (() = $ids =~ /\d+/g) + 1, 'one piece per id plus the flush');

($out, $err, $rc) = run("--tokenizer $tok",
                        qq{"ok"\n"\xff\xfe broken"\n[1, 2]\n"fine"\n});
@lines = split /\n/, $out;
is(scalar(@lines), 4, 'bad lines do not stop the others');
is($lines[1], 'null', 'invalid UTF-8 gets null');
is($lines[2], 'null', 'a non-string gets null');
like($lines[3], qr/^\[510,/, 'the line after them is encoded');
like($err, qr/bad JSON line/, 'the invalid line is reported');
like($err, qr/expected a JSON string/, 'the non-string is reported');
is($rc, 1, 'exit status 1 after bad input');

($out, $err) = run("--tokenizer $tok --decode", qq{[1, "x"]\n[1, 2.5]\n[72]\n});
@lines = split /\n/, $out;
is_deeply([ @lines[0, 1] ], [ 'null', 'null' ], 'non-integer ids get null');
like($err, qr/ids must be integers/, 'and a message');
is($lines[2], '"H"', 'the next line is decoded');

($out) = run("--tokenizer $tok --decode", "[99999, -5, 72]\n");
is($out, qq{"H"\n}, 'ids outside the vocabulary decode to nothing');

open(my $fh, '>', "$dir/bad.json") or die;
print $fh '{"model": {"type": "Unigram", "vocab": []}}';
close $fh;
($out, $err, $rc) = run("--tokenizer $dir/bad.json", qq{"x"\n});
is($rc, 1, 'an unsupported model is refused');
like($err, qr/model type Unigram is not supported/, 'naming the model type');

open($fh, '>', "$dir/trunc.json") or die;
print $fh '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [';
close $fh;
($out, $err, $rc) = run("--tokenizer $dir/trunc.json", qq{"x"\n});
is($rc, 1, 'a truncated file is refused');
like($err, qr/JSON: .* at byte \d+/, 'with the position of the problem');

($out, $err, $rc) = run("--frobnicate", '');
is($rc, 2, 'an unknown option is a usage error');

($out, $err) = run("--chat $cfg",
    qq{{"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true}\n"not a conversation"\n});
@lines = split /\n/, $out;
like($lines[0], qr/hi/, 'the chat template of the tiny model renders a conversation');
is($lines[1], 'null', 'a bad conversation gets null');
like($err, qr/messages must be an array/, 'and a message');

open($fh, '>', "$dir/raise.json") or die;
print $fh '{"chat_template": "{% if messages|length > 1 %}{{ raise_exception(\'one message only\') }}{% endif %}{{ messages[0].content }}"}';
close $fh;
($out, $err) = run("--chat $dir/raise.json",
    qq{[{"role": "user", "content": "a"}]\n[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]\n});
is($out, qq{"a"\nnull\n}, 'raise_exception refuses that conversation only');
like($err, qr/raise_exception: one message only/, 'with the template\'s message');

open($fh, '>', "$dir/unsup.json") or die;
print $fh '{"chat_template": "{% call foo() %}x{% endcall %}"}';
close $fh;
($out, $err, $rc) = run("--chat $dir/unsup.json", '');
is($rc, 1, 'an unsupported template is refused at load');
like($err, qr/unsupported statement \{% call/, 'naming the construct');

done_testing();
