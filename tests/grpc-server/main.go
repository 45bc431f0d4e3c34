// The gRPC server the integration tests put behind slipstream: grpc-go's own interop
// TestService (unary, client-streaming, server-streaming and bidirectional calls), the
// standard health service (grpc.health.v1.Health) and server reflection, so grpcurl can call
// it by name. Plain h2c on -port, or TLS (ALPN h2) with -cert and -key.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/reflection"
)

func main() {
	port := flag.Int("port", 0, "port to listen on (0: any; the port is printed)")
	cert := flag.String("cert", "", "TLS certificate (PEM); with -key, serve TLS")
	key := flag.String("key", "", "TLS key (PEM)")
	notServing := flag.String("not_serving", "", "a service name the health service reports NOT_SERVING")
	flag.Parse()

	var opts []grpc.ServerOption
	if *cert != "" {
		creds, err := credentials.NewServerTLSFromFile(*cert, *key)
		if err != nil {
			log.Fatalf("TLS: %v", err)
		}
		opts = append(opts, grpc.Creds(creds))
	}
	server := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(server, interop.NewTestServer())
	healthServer := health.NewServer()
	healthServer.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthServer.SetServingStatus("grpc.testing.TestService", healthpb.HealthCheckResponse_SERVING)
	if *notServing != "" {
		healthServer.SetServingStatus(*notServing, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	healthpb.RegisterHealthServer(server, healthServer)
	reflection.Register(server)

	listener, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		log.Fatalf("listen: %v", err)
	}
	fmt.Println(listener.Addr().(*net.TCPAddr).Port)
	os.Stdout.Sync()
	go func() {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		<-stop
		server.Stop()
	}()
	if err := server.Serve(listener); err != nil {
		log.Fatalf("serve: %v", err)
	}
}
