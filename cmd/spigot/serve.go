package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/cmd/spigot/internal/rls"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/denycache"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/lease"
	"github.com/spigot-go/spigot/store/memory"
	spigotredis "github.com/spigot-go/spigot/store/redis"
	spigotrueidis "github.com/spigot-go/spigot/store/rueidis"
	spigotvalkey "github.com/spigot-go/spigot/store/valkey"
)

// serveCmd is spigot serve: the rate limit service of Envoy's protocol on
// spigot's stores, configured as envoyproxy/ratelimit is.
func serveCmd(args []string, stdout, stderr io.Writer) int {
	const prog = "spigot serve"
	fs := newFlagSet(prog)
	config := fs.String("config", "", "the `directory` of envoyproxy/ratelimit YAML files (every *.yaml and *.yml), reloaded when it changes")
	check := fs.String("check", "", "load the configuration `directory`, print what it holds or why it is refused, and exit")
	grpcAddr := fs.String("grpc", "127.0.0.1:8081", "the `address` of the gRPC service (ShouldRateLimit, health)")
	httpAddr := fs.String("http", "127.0.0.1:8080", "the `address` of HTTP: POST /json, GET /healthcheck")
	redisAddr := fs.String("redis", "", "a Redis or Valkey `address` to keep the limits in (default: the memory store, this process alone)")
	cluster := fs.String("cluster", "", "comma-separated seed `addresses` of a Redis or Valkey Cluster to keep the limits in")
	prefix := fs.String("prefix", "", "the `prefix` of every key in Redis, as store.WithPrefix (the library's default when empty)")
	client := fs.String("client", "go-redis", "with -redis or -cluster, the `client` library: go-redis, valkey-go or rueidis")
	withHybrid := fs.Bool("hybrid", false, "with -redis or -cluster: keep limiting in this process while Redis is down (store/hybrid, the Local policy)")
	withLease := fs.Bool("lease", false, "decide hot keys from leases in memory (store/lease): token buckets and fixed windows")
	withDenyCache := fs.Bool("denycache", false, "answer a denied key from memory until its RetryAfter (store/denycache)")
	responseHeaders := fs.Bool("response-headers", false, "add RateLimit-Limit, -Remaining and -Reset to responses, as envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED")
	fields := fs.Bool("ratelimit-fields", false, "add the IETF RateLimit-Policy and RateLimit fields to responses")
	shadow := fs.Bool("shadow-mode", false, "answer every request OK, the statuses still saying which descriptors were over, as envoyproxy/ratelimit's SHADOW_MODE")
	if err := parseFlags(fs, args, stdout, "usage: spigot serve -config dir [flags]\n       spigot serve -check dir\n\n"+
		"Serve answers Envoy's rate limit service protocol (ShouldRateLimit over\n"+
		"gRPC, and the same as JSON over HTTP) from envoyproxy/ratelimit's YAML\n"+
		"configuration, on spigot's stores.\n\n"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return usageError(stderr, prog, "%v", err)
	}
	if *check != "" {
		cfg, err := rls.LoadDir(*check)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", prog, err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: the configuration loads: domains %s\n", *check, strings.Join(cfg.Domains(), ", "))
		return 0
	}
	if *config == "" {
		return usageError(stderr, prog, "-config: a configuration directory is required")
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	cfg, err := rls.LoadDir(*config)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 1
	}
	// spigot's own metrics (otelspigot's), and the statistics below, on
	// one Prometheus registry.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		panic(err) // a fresh registry takes the exporter's collector
	}
	meters := otelspigot.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)))
	s, closeStore, err := serveStore(*redisAddr, *cluster, *client, *prefix, *withHybrid, *withLease, *withDenyCache, meters)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 1
	}
	defer closeStore()
	opts := []rls.Option{
		rls.WithErrorHandler(func(err error) { log.Error("the store failed", "err", err) }),
		rls.WithStats(newServeStats(reg).add),
	}
	if *responseHeaders {
		opts = append(opts, rls.WithResponseHeaders(rls.HeaderNames{}))
	}
	if *fields {
		opts = append(opts, rls.WithRateLimitFields())
	}
	if *shadow {
		opts = append(opts, rls.WithShadowMode())
	}
	svc := rls.NewService(s, cfg, opts...)

	gl, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: cannot listen on %s: %v\n", prog, *grpcAddr, err)
		return 1
	}
	hl, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		gl.Close()
		fmt.Fprintf(stderr, "%s: cannot listen on %s: %v\n", prog, *httpAddr, err)
		return 1
	}
	gs := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(gs, svc)
	hs := health.NewServer()
	hs.SetServingStatus("ratelimit", healthpb.HealthCheckResponse_SERVING) // the service name envoyproxy/ratelimit reports
	healthpb.RegisterHealthServer(gs, hs)
	mux := http.NewServeMux()
	mux.Handle("POST /json", svc.JSONHandler())
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "OK") })
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hsrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go rls.Watch(ctx, *config, func(c *rls.Config, err error) {
		if err != nil {
			log.Error("configuration refused; the last good one stays", "dir", *config, "err", err)
			return
		}
		svc.Reload(c)
		log.Info("configuration reloaded", "dir", *config)
	})
	errs := make(chan error, 2)
	go func() { errs <- gs.Serve(gl) }()
	go func() { errs <- hsrv.Serve(hl) }()
	log.Info("serving", "grpc", gl.Addr().String(), "http", hl.Addr().String(), "store", storeName(*redisAddr, *cluster, *client, *withHybrid, *withLease, *withDenyCache))
	fmt.Fprintf(stdout, "spigot serve: gRPC on %s, HTTP on %s (Ctrl-C to stop)\n", gl.Addr(), hl.Addr())
	code := 0
	select {
	case <-ctx.Done():
	case err := <-errs:
		log.Error("a server stopped", "err", err)
		code = 1
	}
	// Graceful: no new calls, the ones in flight answered, for 10 s at most.
	hs.Shutdown()
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hsrv.Shutdown(shutdown)
	select {
	case <-done:
	case <-shutdown.Done():
		gs.Stop()
	}
	return code
}

// serveStore returns the store of serve's flags, and what closes it.
func serveStore(redisAddr, cluster, client, prefix string, withHybrid, withLease, withDenyCache bool, meters otelspigot.Option) (spigot.Store, func(), error) {
	var s spigot.Store = memory.New()
	closeAll := func() {}
	switch {
	case redisAddr != "" && cluster != "":
		return nil, nil, errors.New("-redis and -cluster: choose one")
	case redisAddr != "" || cluster != "":
		addrs := []string{redisAddr}
		if cluster != "" {
			addrs = strings.Split(cluster, ",")
		}
		var opts []store.Option
		if prefix != "" {
			opts = append(opts, store.WithPrefix(prefix))
		}
		var err error
		if s, closeAll, err = remoteStore(client, addrs, cluster != "", opts); err != nil {
			return nil, nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := s.Do(ctx, spigot.Op{Limit: spigot.MustBucket("spigot-serve-probe", 1, spigot.PerSecond(1)), Key: "probe", Action: spigot.Peek}); err != nil && !withHybrid {
			closeAll()
			return nil, nil, fmt.Errorf("cannot reach Redis at %s: %v", strings.Join(addrs, ","), err)
		}
		if withHybrid {
			h := hybrid.New(s, memory.New(), hybrid.WithObserver(otelspigot.HybridObserver(meters)))
			if _, err := otelspigot.ObserveCircuit(h, meters); err != nil {
				closeAll()
				return nil, nil, err
			}
			s = h
		}
	case withHybrid:
		return nil, nil, errors.New("-hybrid needs -redis or -cluster")
	}
	s = otelspigot.Wrap(s, meters) // what the store decides, and its latency
	if withLease {
		l := lease.New(s, lease.WithObserver(otelspigot.LeaseObserver(meters)))
		prev := closeAll
		closeAll = func() { l.Close(context.Background()); prev() }
		s = l
	}
	if withDenyCache {
		s = denycache.New(s)
	}
	return s, closeAll, nil
}

// remoteStore returns spigot's store of client on the server, or cluster,
// at addrs, with the settings the store's doc advises.
func remoteStore(client string, addrs []string, cluster bool, opts []store.Option) (spigot.Store, func(), error) {
	switch client {
	case "go-redis":
		goredis.SetLogger(&logging.VoidLogger{})
		var rdb goredis.UniversalClient
		if cluster {
			rdb = goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		} else {
			rdb = goredis.NewClient(&goredis.Options{Addr: addrs[0], ContextTimeoutEnabled: true})
		}
		return spigotredis.New(rdb, opts...), func() { rdb.Close() }, nil
	case "valkey-go":
		vk, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs, DisableCache: true})
		if err != nil {
			return nil, nil, fmt.Errorf("valkey-go on %s: %v", strings.Join(addrs, ","), err)
		}
		return spigotvalkey.New(vk, opts...), vk.Close, nil
	case "rueidis":
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
		if err != nil {
			return nil, nil, fmt.Errorf("rueidis on %s: %v", strings.Join(addrs, ","), err)
		}
		return spigotrueidis.New(rc, opts...), rc.Close, nil
	}
	return nil, nil, fmt.Errorf("-client %q: want go-redis, valkey-go or rueidis", client)
}

// storeName says which store serve runs on.
func storeName(redisAddr, cluster, client string, withHybrid, withLease, withDenyCache bool) string {
	name := "memory"
	switch {
	case redisAddr != "":
		name = client + " " + redisAddr
	case cluster != "":
		name = client + " cluster " + cluster
	}
	if withHybrid {
		name = "hybrid(" + name + ")"
	}
	if withLease {
		name = "lease(" + name + ")"
	}
	if withDenyCache {
		name = "denycache(" + name + ")"
	}
	return name
}

// serveStats are spigot serve's Prometheus counters, per domain and
// descriptor, named as envoyproxy/ratelimit's statistics are, its
// ratelimit.service.rate_limit.<domain>.<descriptor>.<stat> with the
// domain and the descriptor as labels: ratelimit_service_rate_limit_<stat>.
type serveStats struct {
	total, over, near, within, shadow *prometheus.CounterVec
}

func newServeStats(reg prometheus.Registerer) *serveStats {
	counter := func(name, help string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + name, Help: help}, []string{"domain", "descriptor"})
		reg.MustRegister(c)
		return c
	}
	return &serveStats{
		total:  counter("total_hits", "Hits of a descriptor's limit."),
		over:   counter("over_limit", "Hits over a descriptor's limit."),
		near:   counter("near_limit", "Hits within a descriptor's limit, past 80 % of it."),
		within: counter("within_limit", "Hits within a descriptor's limit."),
		shadow: counter("shadow_mode", "Hits over a descriptor's limit in shadow mode."),
	}
}

func (s *serveStats) add(st rls.Stat) {
	n := float64(st.Hits)
	labels := []string{st.Domain, st.Descriptor}
	s.total.WithLabelValues(labels...).Add(n)
	switch {
	case st.Over:
		s.over.WithLabelValues(labels...).Add(n)
		if st.Shadow {
			s.shadow.WithLabelValues(labels...).Add(n)
		}
	default:
		s.within.WithLabelValues(labels...).Add(n)
		if st.Near {
			s.near.WithLabelValues(labels...).Add(n)
		}
	}
}
