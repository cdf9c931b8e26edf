#!/usr/bin/perl
# 35-cli.t: every program the Makefile builds (the engine, tools/*.c,
# bench/*.c) follows pl_cli.h's conventions: --help prints its usage on
# stdout with status 0, --version prints "NAME VERSION" (the version of
# proto/pl_version.h) with status 0, and an unknown flag prints one line
# with a hint on stderr, nothing on stdout, with status 2.
use strict;
use warnings;
use FindBin;
use File::Temp qw(tempdir);
use Test::More;

my $root  = "$FindBin::Bin/..";
my $build = $ENV{PAGEDLLM_BUILD} // "$root/build";
my $dir   = tempdir(CLEANUP => 1);

open my $fh, '<', "$root/proto/pl_version.h" or die "pl_version.h: $!";
my ($version) = map { /^#define PL_VERSION "([^"]+)"/ ? $1 : () } <$fh>;
close $fh;
like($version // '', qr/^\d+\.\d+\.\d+$/, "the version is $version");

# the Makefile's ENGINE, TOOLS and BENCHES
my @programs = ("$build/pagedllm-engine",
                (map { m{/([^/]+)\.c$}; "$build/$1" } glob "$root/tools/*.c"),
                (map { m{/([^/]+)\.c$}; "$build/bench/$1" }
                 glob "$root/bench/*.c"));
ok(@programs >= 7, scalar(@programs) . ' programs');

sub run {
    my ($prog, @args) = @_;
    my $out = qx{$prog @args 2> $dir/err < /dev/null};
    my $rc = $? >> 8;
    open my $e, '<', "$dir/err" or die;
    local $/;
    return ($rc, $out, <$e> // '');
}

for my $prog (@programs) {
    (my $name = $prog) =~ s{.*/}{};
    ok(-x $prog, "$name is built") or next;

    my ($rc, $out, $err) = run($prog, '--help');
    is($rc, 0, "$name --help: status 0");
    like($out, qr/\Ausage: \Q$name\E /, "$name --help: usage on stdout");
    like($out, qr/--help\b.*\n(?s:.*)--version\b/,
         "$name --help: names --help and --version");
    is($err, '', "$name --help: nothing on stderr");

    ($rc, $out, $err) = run($prog, '--version');
    is($rc, 0, "$name --version: status 0");
    is($out, "$name $version\n", "$name --version: \"$name $version\"");
    is($err, '', "$name --version: nothing on stderr");

    ($rc, $out, $err) = run($prog, '--no-such-flag');
    is($rc, 2, "$name --no-such-flag: status 2");
    is($out, '', "$name --no-such-flag: nothing on stdout");
    is($err, "$name: unknown option '--no-such-flag'; try '$name --help'\n",
       "$name --no-such-flag: one line with the hint on stderr");

    ($rc, $out, $err) = run($prog, '--no-such-flag', '--help');
    is($rc, 0, "$name: --help wins wherever it stands");
}

done_testing;
