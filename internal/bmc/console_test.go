package bmc_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/anvilproj/anvil/internal/bmc"
	"github.com/anvilproj/anvil/internal/bmc/bmctest"
	"github.com/anvilproj/anvil/internal/testtool"
)

// serialPort is the machine's end of a Serial over LAN console: the TCP
// server ipmi_sim dials as its SOL device.
type serialPort struct {
	ln    net.Listener
	conns chan net.Conn
}

func newSerialPort(t *testing.T) *serialPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &serialPort{ln: ln, conns: make(chan net.Conn, 4)}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			p.conns <- c
		}
	}()
	return p
}

// conn returns the simulator's connection to the serial port.
func (p *serialPort) conn(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-p.conns:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("ipmi_sim did not connect to the machine's serial port")
		return nil
	}
}

// attach runs IPMI.Console until in ends or ctx does, returning its error
// on the channel.
func attach(ctx context.Context, c bmc.Conn, in io.Reader, out io.Writer) <-chan error {
	done := make(chan error, 1)
	go func() { done <- steady.Console(ctx, c, in, out) }()
	return done
}

// TestConsoleOverSOL attaches to ipmi_sim's Serial over LAN console: what
// the machine writes on its serial port arrives, what is typed reaches
// the serial port, the end of the input ends the console, and the payload
// is released (a second attach works).
func TestConsoleOverSOL(t *testing.T) {
	port := newSerialPort(t)
	sim := bmctest.StartSimSOL(t, simUser, simPassword, port.ln.Addr().String())
	machine := port.conn(t)
	c := bmc.Conn{Host: sim.Host, Port: sim.Port, Username: simUser, Password: simPassword, CipherSuite: "3"}

	for round := 1; round <= 2; round++ {
		inR, inW := io.Pipe()
		out := &testtool.SyncBuffer{}
		done := attach(context.Background(), c, inR, out)
		// The machine writes until the console shows it: the first lines
		// may go out before the payload is active.
		testtool.WaitFor(t, "the machine's output on the console", func() bool {
			if _, err := machine.Write([]byte("node login: ")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			return strings.Contains(out.String(), "node login: ")
		})
		if _, err := inW.Write([]byte("root\r")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 0, 16)
		buf := make([]byte, 16)
		_ = machine.SetReadDeadline(time.Now().Add(10 * time.Second))
		for !bytes.Contains(got, []byte("root\r")) {
			n, err := machine.Read(buf)
			if err != nil {
				t.Fatalf("round %d: the serial port read %q, then: %v", round, got, err)
			}
			got = append(got, buf[:n]...)
		}
		inW.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: Console after the input ended: %v", round, err)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("round %d: Console did not return when its input ended", round)
		}
	}
}

// TestConsoleRefusals: a console already attached elsewhere, and a wrong
// password, are refused with what to do, the password never echoed.
func TestConsoleRefusals(t *testing.T) {
	port := newSerialPort(t)
	sim := bmctest.StartSimSOL(t, simUser, simPassword, port.ln.Addr().String())
	c := bmc.Conn{Host: sim.Host, Port: sim.Port, Username: simUser, Password: simPassword, CipherSuite: "3"}

	ctx, cancel := context.WithCancel(context.Background())
	inR, inW := io.Pipe()
	defer inW.Close()
	first := attach(ctx, c, inR, io.Discard)
	time.Sleep(time.Second) // the first console is attached (or failed: checked below)
	select {
	case err := <-first:
		t.Fatalf("the first console ended: %v", err)
	default:
	}
	err := <-attach(context.Background(), c, strings.NewReader(""), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "already attached elsewhere") {
		t.Errorf("second console: %v; want already attached elsewhere", err)
	}
	cancel()
	if err := <-first; err != nil {
		t.Errorf("first console, canceled: %v", err)
	}

	wrong := c
	wrong.Password = "not-the-password"
	err = <-attach(context.Background(), wrong, strings.NewReader(""), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "refused the username or password") || strings.Contains(err.Error(), wrong.Password) {
		t.Errorf("wrong password: %v", err)
	}
}
