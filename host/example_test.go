package host_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/gatehouse-dev/gatehouse/host"
)

// An app serves its handler wrapped by the host, and runs the host
// protocol next to it. Here a throwaway embedded bus stands in for the
// cluster's; a real app dials the gateway's bus URL, with reconnects on.
func Example() {
	bus := startExampleBus()
	defer bus.Shutdown()
	nc, err := nats.Connect(bus.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	seen := make(chan string, 10)
	nc.Subscribe(host.WildcardSubject("demo"), func(m *nats.Msg) { seen <- m.Subject })
	nc.Flush()

	// The app's part: a key (enrolled via the control API) and its address.
	key, _ := host.GenerateKey() // in production: host.LoadKey("host.pem")
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	srv := httptest.NewUnstartedServer(nil) // its listener is bound: the address is known
	defer srv.Close()
	h, err := host.New(host.Options{
		Conn: nc, Cluster: "demo", HostID: "hello-1", Key: key,
		Apps: []string{"hello"}, Addr: srv.Listener.Addr().String(),
	})
	if err != nil {
		log.Fatal(err)
	}
	srv.Config.Handler = h.Wrap(app) // answers the gateway's challenge, serves the rest
	srv.Start()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- h.Run(ctx) }() // announce, heartbeat, leave on stop

	fmt.Println(<-seen)
	stop()
	<-done
	fmt.Println(<-seen)
	// Output:
	// gatehouse.demo.hosts.announce
	// gatehouse.demo.hosts.leave
}

func startExampleBus() *server.Server {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true})
	if err != nil {
		log.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		log.Fatal("bus not ready")
	}
	return ns
}
