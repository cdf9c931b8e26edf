#!/usr/bin/perl
# Many streams at once on two workers, half of them dropped by their
# clients midway: the others finish intact, nothing leaks, nothing crashes.

use strict;
use warnings;

use lib 't/lib';
use JSON::PP;
use Test::More;
use Time::HiRes qw(time);

use PagedLLM::Test;

my $J = $PagedLLM::Test::JSON;
my $t = PagedLLM::Test->new(workers => 2)->start;

my $n = 24;
my @s = map {
    $t->stream_start('/v1/completions',
        $J->encode({ prompt => "stream $_", max_tokens => 200 + $_,
                     ignore_eos => JSON::PP::true,
                     stream => JSON::PP::true }))
} 1 .. $n;
is(scalar(grep { $_->{status} == 200 } @s), $n, "$n streams start");

my @drop = grep { $_ % 2 } 0 .. $n - 1;
my @keep = grep { !($_ % 2) } 0 .. $n - 1;

PagedLLM::Test::read_chunks([@s[@drop]], time + 30, 2);
close $s[$_]{sock} for @drop;

my $res = PagedLLM::Test::read_chunks([@s[@keep]], time + 60);
my $intact = 0;
for my $i (0 .. $#keep) {
    my $c = $res->[$i];
    my ($ev, $err) = PagedLLM::Test::sse_events($c->{chunks});
    my @tok = grep { $_->{data} ne '[DONE]' } @$ev;
    my $want = 200 + $keep[$i] + 1;
    $intact++ if $c->{complete} && !$c->{error} && !$err
        && $ev->[-1]{data} eq '[DONE]'
        && (@tok == $want || @tok == $want + 1);
}
is($intact, scalar @keep, 'every stream that was read finished intact');

my $st = $t->wait_status(sub {
    $_[0]{requests}{running} == 0 && $_[0]{requests}{waiting} == 0
        && $_[0]{kv_blocks}{used} == 0 }, 10);
is($st->{json}{requests}{running}, 0, 'nothing left running');
is($st->{json}{kv_blocks}{used}, 0, 'no KV block leaked');

my $log = $t->error_log;
unlike($log, qr/exited on signal|\[(alert|crit|emerg)\]/,
       'no worker crashed, no alerts');
is($t->completion(prompt => 'ok', max_tokens => 2)->{status}, 200,
   'still serving');

$t->finish;
done_testing;
