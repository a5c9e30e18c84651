// Command netdelay forwards TCP connections to a target and holds every
// chunk of bytes for a fixed time in each direction, so a gate on one
// machine meets its database as if across a network: each round trip costs
// twice the delay. It changes nothing but time; order and content pass as
// they are.
//
//	go run ./cmd/netdelay -listen 127.0.0.1:6432 -target 127.0.0.1:5432 -delay 250us
//
// Then point the gate (or ASYNCGATE_TEST_POSTGRES) at port 6432.
package main

import (
	"flag"
	"log"
	"net"
	"time"
)

// chunk is bytes read and the time they may be written.
type chunk struct {
	at time.Time
	b  []byte
}

// pipe copies src to dst, each chunk delay after it was read.
func pipe(dst net.Conn, src net.Conn, delay time.Duration) {
	ch := make(chan chunk, 4096)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 64<<10)
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{time.Now().Add(delay), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	broken := false
	for c := range ch { // until src ends; after a failed write, only drained
		if broken {
			continue
		}
		if w := time.Until(c.at); w > 0 {
			time.Sleep(w)
		}
		if _, err := dst.Write(c.b); err != nil {
			broken = true
			_ = src.Close()
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:6432", "address to listen on")
	target := flag.String("target", "127.0.0.1:5432", "address to forward to")
	delay := flag.Duration("delay", 250*time.Microsecond, "time each chunk is held, in each direction")
	flag.Parse()
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("netdelay: %s → %s, %s each way", l.Addr(), *target, *delay)
	for {
		c, err := l.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			t, err := net.Dial("tcp", *target)
			if err != nil {
				log.Printf("netdelay: %v", err)
				_ = c.Close()
				return
			}
			go pipe(t, c, *delay)
			pipe(c, t, *delay)
			_ = c.Close()
			_ = t.Close()
		}()
	}
}
