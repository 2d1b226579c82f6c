package redisdelay

import (
	"fmt"
	"strings"
)

// errorPrefix starts the text of every error of this package.
const errorPrefix = "redisdelay: "

// wrapped is an error of this package adding context to another. Its text
// names the package once, however deep the chain: the wrapped error's own
// prefix is dropped ("redisdelay: publish ...: register topic ...", not
// "...: redisdelay: register topic ...").
type wrapped struct {
	context string
	err     error
}

func (e *wrapped) Error() string {
	return errorPrefix + e.context + ": " + strings.TrimPrefix(e.err.Error(), errorPrefix)
}

func (e *wrapped) Unwrap() error { return e.err }

// wrap says what was being done when err happened; err stays reachable
// with errors.Is and errors.As.
func wrap(err error, format string, args ...any) error {
	return &wrapped{context: fmt.Sprintf(format, args...), err: err}
}
