#!/usr/bin/perl
# The module file replaced while nginx runs with it loaded, as a rebuild
# (make, tools/build-module.sh) does beside a running test or server:
# tools/replace-file.sh swaps the file by rename, so the master keeps the
# module it loaded, the running worker serves on and a worker forked after
# it starts and serves too.  Written in place, the file's new pages show
# through the master's mapping: the next request kills the worker and
# every worker forked after it dies at once.

use strict;
use warnings;

use lib 't/lib';
use File::Temp qw(tempdir);
use Test::More;
use Time::HiRes qw(time sleep);

use PagedLLM::Test;

my $build = $ENV{PAGEDLLM_BUILD}
    or die "PAGEDLLM_BUILD is not set (run the tests with make test)\n";

# a build directory of our own whose module file the test may replace
my $own = tempdir('pagedllm-so-XXXXXX', TMPDIR => 1, CLEANUP => 1);
symlink "$build/$_", "$own/$_" or die "symlink $_: $!\n"
    for qw(pagedllm-engine models);
system('cp', "$build/ngx_http_pagedllm_module.so", $own) == 0
    or die "cp: $?\n";

local $ENV{PAGEDLLM_BUILD} = $own;
my $t = PagedLLM::Test->new->start;

sub workers {
    open my $fh, '<', $t->dir . '/nginx.pid' or return ();
    chomp(my $master = <$fh>);
    my @w;
    for my $stat (glob '/proc/[0-9]*/stat') {
        open my $s, '<', $stat or next;
        my ($pid, $ppid) = (<$s> // '') =~ /^(\d+) \(.*\) \S+ (\d+)/ or next;
        push @w, $pid if $ppid == $master;
    }
    return @w;
}

is($t->completion(prompt => 'before', max_tokens => 4)->{status}, 200,
   'the worker serves');
my @before = workers();
is(scalar @before, 1, 'nginx runs one worker');

# another build of the module: any other ELF file of other contents
is(system('tools/replace-file.sh', "$build/pagedllm-engine",
          "$own/ngx_http_pagedllm_module.so"), 0,
   'tools/replace-file.sh replaces the module file');

is($t->completion(prompt => 'after', max_tokens => 4)->{status}, 200,
   'the running worker still serves');

# the worker ends; the master forks another from the module it holds
kill 'TERM', @before;
my ($status, @after) = (0);
my $deadline = time + 30;
until ($status == 200 || time > $deadline) {
    @after = grep { $_ != $before[0] } workers();
    $status = $t->completion(prompt => 'respawned', max_tokens => 4)->{status}
        if @after;
    sleep 0.1;
}
is(scalar @after, 1, 'the master started a new worker');
is($status, 200, 'the new worker serves');

$t->finish;

done_testing;
