#!/usr/bin/perl
# A worker tokenizes with exactly the engine's tokenizer or not at all:
# when tokenizer.json differs from what the engine hashed, the worker
# refuses to attach and answers 503; once the file is right again it
# attaches by itself.

use strict;
use warnings;

use lib 't/lib';
use File::Copy qw(copy);
use JSON::PP;
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Test;

my $probe = PagedLLM::Test->new;
my $model = $probe->dir . '/model';
mkdir $model or die "$model: $!";
my $tiny = "$ENV{PAGEDLLM_BUILD}/models/tiny";
opendir my $dh, $tiny or die "$tiny: $!";
for my $f (grep { -f "$tiny/$_" } readdir $dh) {
    copy("$tiny/$f", "$model/$f") or die "copy $f: $!";
}

my $t = PagedLLM::Test->new(model => $model);
$t->start_engine;

my $tok = "$model/tokenizer.json";
open my $fh, '<', $tok or die;
my $orig = do { local $/; <$fh> };
close $fh;

sub write_tok {
    open my $w, '>', $tok or die "$tok: $!";
    print $w @_;
    close $w;
}

write_tok($orig . ' ');
$t->start_nginx;

my $r = $t->completion(prompt => 'x', max_tokens => 2);
is($r->{status}, 503, 'tokenizer differs from the engine: 503');
is($t->status->{json}{engine}, 'detached', 'tokenizer differs: detached');
like($t->error_log, qr/tokenizer .* differs from the engine's/,
     'tokenizer differs: the error log says so');

write_tok($orig);

my $deadline = time + 10;
do {
    $r = $t->completion(prompt => 'x', max_tokens => 2);
    sleep 0.1 if $r->{status} != 200;
} while ($r->{status} != 200 && time < $deadline);
is($r->{status}, 200, 'tokenizer restored: the worker attaches and serves');

$t->finish;
$probe->finish;
done_testing;
