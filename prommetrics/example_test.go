package prommetrics_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redisdelay/watermill-redisdelay"
	"github.com/redisdelay/watermill-redisdelay/prommetrics"
)

// Serve /metrics and /healthz: this process's metrics (pass the same
// Metrics to every Publisher, Subscriber and Manager), the queue sizes in
// Redis, and a health check usable as a Kubernetes probe.
func ExampleNew() {
	client := exampleClient() // e.g. redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	metrics, err := prommetrics.New(reg)
	if err != nil {
		panic(err)
	}
	pub, err := redisdelay.NewPublisher(redisdelay.PublisherConfig{Client: client, Metrics: metrics}, nil)
	if err != nil {
		panic(err)
	}
	defer pub.Close()
	// ... and SubscriberConfig.Metrics, ManagerConfig.Metrics likewise.
	if err := pub.Publish("prommetrics-example", message.NewMessage("1", []byte("hello"))); err != nil {
		panic(err)
	}

	insp, err := redisdelay.NewInspector(redisdelay.InspectorConfig{Client: client})
	if err != nil {
		panic(err)
	}
	queues, err := prommetrics.NewCollector(prommetrics.CollectorConfig{Inspector: insp}) // every topic
	if err != nil {
		panic(err)
	}
	reg.MustRegister(queues)

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/healthz", redisdelay.HealthHandler(insp, redisdelay.HealthConfig{}, 0))
	srv := httptest.NewServer(mux) // e.g. http.ListenAndServe(":9090", mux)
	defer srv.Close()

	res, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	fmt.Println(res.StatusCode)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "redisdelay_published_messages_total") || line == "# TYPE redisdelay_waiting_messages gauge" {
			fmt.Println(line)
		}
	}
	// Output:
	// 200
	// redisdelay_published_messages_total{delay="immediate",topic="prommetrics-example"} 1
	// # TYPE redisdelay_waiting_messages gauge
}
