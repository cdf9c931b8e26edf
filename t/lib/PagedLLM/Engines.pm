package PagedLLM::Engines;

# Several CPU engines behind one nginx, for t/67-engines*.t: the group
# configuration, the engines started and stopped one by one, and each
# engine's counters read from /metrics (its engine="PATH" label).
#
#   my $t = PagedLLM::Engines::start(3, groups => "...", server => "...");
#   my @n = PagedLLM::Engines::counter($t, 'pagedllm_requests_total');

use strict;
use warnings;

use Time::HiRes qw(time sleep);

use PagedLLM::Test;

# N engines (engine0 .. engineN-1), nginx with one worker; the group "all"
# holds them unless opt{groups} (a text where ENGINE<i> stands for engine
# i's socket) says otherwise.  opt{models}[i] and opt{args}[i] are engine
# i's model and arguments.
sub start {
    my ($n, %opt) = @_;

    my $groups = $opt{groups}
                 // "pagedllm_engines all {\n"
                    . join('', map { "        engine unix:ENGINE$_;\n" }
                                   0 .. $n - 1)
                    . "    }";

    my $t = PagedLLM::Test->new(
        workers => $opt{workers} // 1,
        api => $opt{api} // "        location /v1/ {\n"
                          . "            pagedllm all;\n        }\n",
        server => "        location = /metrics { pagedllm_metrics; }\n"
                  . "        location = /health { pagedllm_health; }\n"
                  . ($opt{server} // ''),
        engines_conf => 'ENGINES',
    );

    $groups =~ s/ENGINE(\d+)/$t->engine_sock($1)/ge;
    $t->{engines_conf} = $groups;
    $t->{engine_opts} = { models => $opt{models} // [],
                          args => $opt{args} // [] };

    start_engine($t, $_) for 0 .. $n - 1;
    $t->start_nginx;
    wait_attached($t, [0 .. $n - 1]) or die "the engines did not attach\n";

    return $t;
}

sub start_engine {
    my ($t, $i) = @_;
    my $o = $t->{engine_opts};
    $t->start_engine_n($i, model => $o->{models}[$i],
                       args => $o->{args}[$i] // []);
}

# name{labels} => value
sub scrape {
    my ($t) = @_;
    my %v;
    for (split /\n/, $t->request(GET => '/metrics')->{body} // '') {
        $v{$1} = $2 if /^(\w+(?:\{.*\})?) (\S+)$/;
    }
    return \%v;
}

# engine i's sample of a family (labels: more of them, "a=\"b\"")
sub sample {
    my ($t, $v, $name, $i, $labels) = @_;
    my $sock = $t->engine_sock($i);
    return $v->{"$name\{engine=\"$sock\"" . ($labels ? ",$labels" : '') . '}'};
}

# one value per engine of the group "all" (0 .. $n - 1)
sub counter {
    my ($t, $name, $n, $labels) = @_;
    my $v = scrape($t);
    return map { sample($t, $v, $name, $_, $labels) // 0 } 0 .. ($n // 3) - 1;
}

# Waits until the worker is attached to every engine listed and to none
# of @$detached, and every engine listed counts all of nginx's workers
# attached (pagedllm_engine_attached is the answering worker's alone: with
# two workers the other may not have attached yet); true if it happened
# within 10 s.
sub wait_attached {
    my ($t, $attached, $detached) = @_;
    my $deadline = time + 10;
    my $workers = $t->{workers} // 1;
    while (time < $deadline) {
        my $v = scrape($t);
        my $ok = 1;
        $ok &&= (sample($t, $v, 'pagedllm_engine_attached', $_) // -1) == 1
                && (sample($t, $v, 'pagedllm_workers', $_) // 0) >= $workers
            for @$attached;
        $ok &&= (sample($t, $v, 'pagedllm_engine_attached', $_) // -1) == 0
            for @{ $detached // [] };
        return 1 if $ok;
        sleep 0.05;
    }
    return 0;
}

# per-engine difference of two counter lists
sub delta {
    my ($after, $before) = @_;
    return map { $after->[$_] - $before->[$_] } 0 .. $#$after;
}

1;
