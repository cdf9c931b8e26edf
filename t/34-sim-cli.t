#!/usr/bin/perl
# 34-sim-cli.t: pagedllm-sim's command line (--help on stdout with status
# 0; an unknown flag, a bad value or a stray argument as one line on
# stderr with a hint and status 2) and its determinism: the same seed
# gives the same table, with the paged policy keeping more of its KV
# slots filled and a larger batch than Orca-Max on ShareGPT.
use strict;
use warnings;
use FindBin;
use File::Temp qw(tempdir);
use Test::More;

my $root  = "$FindBin::Bin/..";
my $build = $ENV{PAGEDLLM_BUILD} // "$root/build";
my $sim   = "$build/pagedllm-sim";
my $dir   = tempdir(CLEANUP => 1);

ok(-x $sim, 'pagedllm-sim is built') or BAIL_OUT('build first');

sub run {
    my $out = qx{$sim @_ 2> $dir/err};
    my $rc = $? >> 8;
    open(my $fh, '<', "$dir/err") or die;
    local $/;
    my $err = <$fh> // '';
    return ($rc, $out, $err);
}

my ($rc, $out, $err) = run('--help');
is($rc, 0, '--help: status 0');
like($out, qr/^usage: pagedllm-sim/, '--help: usage on stdout');
for my $flag (qw(workload rate requests block-size kv-tokens max-num-seqs
                 max-num-batched-tokens preemption-mode seed)) {
    like($out, qr/--\Q$flag\E\b/, "--help documents --$flag");
}
is($err, '', '--help: nothing on stderr');

for my $case (['--bogus', qr/unknown option.*--bogus/],
              ['--preemption-mode auto', qr/--preemption-mode auto/],
              ['--workload chat', qr/--workload chat/],
              ['--rate 0', qr/must be positive/],
              ['extra', qr/unexpected argument 'extra'/]) {
    my ($args, $re) = @$case;
    ($rc, $out, $err) = run($args);
    is($rc, 2, "$args: status 2");
    like($err, qr/\A[^\n]*$re[^\n]*try 'pagedllm-sim --help'\n\z/,
         "$args: one line, "
         . 'with a hint');
    is($out, '', "$args: nothing on stdout");
}

my @args = ('--workload', 'sharegpt', '--rate', '2', '--requests', '300');
my ($rc1, $t1) = run(@args);
my ($rc2, $t2) = run(@args);
is($rc1, 0, 'a run: status 0');
is($t1, $t2, 'the same seed gives the same table');
my %row = map { my @f = split; ($f[0] => \@f) }
          grep { /^(paged|orca-\w+) / } split /\n/, $t1;
is(scalar keys %row, 4, 'one row per KV policy');
(my $paged_util = $row{paged}[1]) =~ s/%//;
(my $max_util = $row{'orca-max'}[1]) =~ s/%//;
cmp_ok($paged_util, '>', 2 * $max_util,
       'paged fills over twice the share of its KV slots that Orca-Max does');
cmp_ok($row{paged}[2], '>', $row{'orca-max'}[2],
       'and batches more sequences');

done_testing();
