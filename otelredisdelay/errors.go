package otelredisdelay

import "errors"

var errNilPublisher = errors.New("otelredisdelay: PublisherDecorator got a nil publisher: decorate the Publisher redisdelay.NewPublisher returned")
