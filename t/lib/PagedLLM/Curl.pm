package PagedLLM::Curl;

# curl as a child process, for the tests that speak what PagedLLM::Test's
# raw HTTP/1.1 client cannot (HTTP/2, TLS).  Its output comes back through
# a pipe, read as it arrives; the response head it saw goes to a file.
# Core Perl only.
#
#   my $c = PagedLLM::Curl->start("$dir/h2.head", @curl_args);
#   my $ev = $c->events(3, time + 30);  # SSE payloads read so far
#   my $rc = $c->finish;                # curl's exit code
#   my $line = $c->head;                # 'HTTP/2 200'; $c->{headers}{...}
#   my $r = PagedLLM::Curl->run("$dir/h2.head", @curl_args);
#                                       # all at once: events, rc, head
#   PagedLLM::Curl::killed_stream_ok($t, 'h2', \&curl_start, $url);

use strict;
use warnings;

use IO::Select;
use JSON::PP;
use Test::More;
use Time::HiRes qw(time);

sub start {
    my ($class, $head_file, @args) = @_;
    my $pid = open(my $fh, '-|', 'curl', '-sS', '-N', '-D', $head_file,
                   @args)
        // die "curl: $!\n";
    return bless { pid => $pid, fh => $fh, buf => '',
                   head_file => $head_file, headers => {} }, $class;
}

# Reads SSE events until $want have arrived (0: all of them), curl exits or
# $deadline passes; returns the payloads (the text after "data: ").
sub events {
    my ($c, $want, $deadline) = @_;
    my $sel = IO::Select->new($c->{fh});
    while (1) {
        my @ev = $c->{buf} =~ /data: ([^\n]*)\n\n/g;
        return \@ev if ($want && @ev >= $want) || $c->{eof};
        my $left = $deadline - time;
        return \@ev if $left <= 0 || !$sel->can_read($left);
        my $n = sysread($c->{fh}, $c->{buf}, 65536, length $c->{buf});
        $c->{eof} = 1 unless $n;
    }
}

sub finish {
    my ($c) = @_;
    close $c->{fh};
    return $? >> 8;
}

# The response head curl saw: its first line; its headers, lowercased,
# into $c->{headers}.
sub head {
    my ($c) = @_;
    open my $fh, '<', $c->{head_file} or return '';
    my ($l, @h) = map { s/\s+$//r } <$fh>;
    $c->{headers} = { map { /^([^:]+):\s*(.*)$/ ? (lc $1, $2) : () } @h };
    return $l // '';
}

# start, then everything curl writes within 30 s: { events, rc, head,
# headers, buf }.
sub run {
    my ($class, @args) = @_;
    my $c = $class->start(@args);
    $c->{events} = $c->events(0, time + 30);
    $c->{rc} = $c->finish;
    $c->{head} = $c->head;
    return $c;
}

# A completion streamed through curl ($start->(@curl_args) starts one) long
# enough to outlast the checks: its events arrive while it runs; killing
# curl aborts the generation and frees its KV blocks; the server of test
# $t still serves.  The checks' names begin with $label.
sub killed_stream_ok {
    my ($t, $label, $start, $url) = @_;
    my $ctx = $t->request(GET => '/v1/models')->{json}{data}[0]{max_model_len};
    my $long = $ctx - 20;
    my $before = $t->status->{json};
    my $c = $start->($url, '-d',
                     $PagedLLM::Test::JSON->encode({
                         prompt => 'Go on and on', max_tokens => $long,
                         stream => JSON::PP::true,
                         ignore_eos => JSON::PP::true }));
    my $ev = $c->events(3, time + 30);
    ok(@$ev >= 3, "$label long stream: the first events arrived");
    my $busy = $t->status->{json};
    ok($busy->{requests}{running} + $busy->{requests}{waiting} >= 1
           && $busy->{kv_blocks}{used} >= 1,
       "$label long stream: events arrive while the request still runs");

    kill 'KILL', $c->{pid};
    close $c->{fh};

    my $st = $t->wait_status(sub {
        $_[0]{requests}{running} == 0 && $_[0]{requests}{waiting} == 0
            && $_[0]{kv_blocks}{used} == 0
    }, 10)->{json};
    is($st->{kv_blocks}{used}, 0, "$label client killed: no KV block used");
    is($st->{requests}{running}, 0, "$label client killed: nothing running");
    ok($st->{generation_tokens_total} - $before->{generation_tokens_total}
           < $long, "$label client killed: the generation stopped early");

    is($t->completion(prompt => 'Still here', max_tokens => 2)->{status},
       200, "still serving after the $label client left");
}

1;
