package PagedLLM::Deploy;

# The deployments of docs/DEPLOYMENT.md on loopback: nginx instances whose
# http { } block is a file of t/fixtures/deploy/ with its @NAME@ fields
# filled in, so that the tests run the configurations the document shows.
#
#   my $a = PagedLLM::Deploy->serving->start;     # engine + serving nginx
#   my $f = PagedLLM::Deploy->front($a, $b)->start_nginx;
#
# Each is a PagedLLM::Test (its requests, streams, logs and stop), with
# the harness's own lines (module, pid, logs, temp folders) around the
# fixture.

use strict;
use warnings;

use parent -norequire, 'PagedLLM::Test';

use PagedLLM::Test;

our $FIXTURES = 't/fixtures/deploy';

sub slurp {
    my ($path) = @_;
    open my $fh, '<', $path or die "$path: $!\n";
    local $/;
    return <$fh>;
}

# The text of a fixture, as the document shows it.
sub fixture { slurp("$FIXTURES/$_[0]") }

# A serving instance: an engine and nginx with serving.conf.
sub serving {
    my ($class, %opt) = @_;
    my $self = $class->SUPER::new(%opt);
    $self->{fixture} = 'serving.conf';
    $self->{fields} = { ENGINE_SOCKET => $self->{sock},
                        LISTEN => "127.0.0.1:$self->{port}" };
    return $self;
}

# The front tier over serving instances: nginx with front.conf, no engine.
sub front {
    my ($class, @serving) = @_;
    my $self = $class->SUPER::new;
    $self->{fixture} = 'front.conf';
    $self->{fields} = { MODEL_DIR => $self->{model},
                        LISTEN => "127.0.0.1:$self->{port}" };
    $self->{fields}{"SERVING_$_"} = "127.0.0.1:" . $serving[$_ - 1]->port
        for 1 .. @serving;
    return $self;
}

# nginx with the http { } text given, @LISTEN@ and @MODEL_DIR@ filled in
# (and @BACKEND@, a second free address), no engine: for a test of the
# directives.
sub with_http {
    my ($class, $http) = @_;
    my $self = $class->SUPER::new;
    $self->{http_text} = $http;
    $self->{fields} = { MODEL_DIR => $self->{model},
                        LISTEN => "127.0.0.1:$self->{port}",
                        BACKEND => '127.0.0.1:' . PagedLLM::Test::free_port() };
    return $self;
}

sub address { "127.0.0.1:$_[0]{port}" }

# nginx -t of the configuration: its exit status and what it printed.
# Under make test-sanitize, without LeakSanitizer: nginx leaves the pool
# of a configuration it refused to the exit, by design.
sub check_conf {
    my ($self) = @_;
    my $d = $self->{dir};
    local $ENV{ASAN_OPTIONS} = join ':', grep { defined }
                                    $ENV{ASAN_OPTIONS}, 'detect_leaks=0';
    $self->write_conf;
    my $out = `$self->{nginx} -t -p $d/ -c $d/nginx.conf -e $d/error.log 2>&1`;
    return ($? >> 8, $out);
}

sub write_conf {
    my ($self) = @_;
    my $d = $self->{dir};
    my $user = $> == 0 ? 'user root;' : '';

    my $http = $self->{http_text} // fixture($self->{fixture});
    $http =~ s/\@(\w+)\@/$self->{fields}{$1}
                         \/\/ die "no value for \@$1\@\n"/ge;
    $http =~ s/^(?=.)/    /mg;

    mkdir "$d/logs";
    open my $fh, '>', "$d/nginx.conf" or die "$d/nginx.conf: $!";
    print $fh <<"EOF";
load_module $self->{build}/ngx_http_pagedllm_module.so;
$user
worker_processes 1;
pid $d/nginx.pid;
error_log $d/error.log info;

events {
    worker_connections 256;
}

http {
    access_log $d/access.log;
    client_body_temp_path $d/client_body;
    proxy_temp_path $d/proxy;
    fastcgi_temp_path $d/fastcgi;
    uwsgi_temp_path $d/uwsgi;
    scgi_temp_path $d/scgi;

$http
}
EOF
    close $fh;
}

1;
