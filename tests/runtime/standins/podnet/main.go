// Command podnet runs a command in a network namespace of its own, as a Pod's containers run,
// with one TCP address of the host (the API server) forwarded into it.
//
//	podnet --forward 127.0.0.1:6443 -- /path/to/binary args...
//
// The runtime suite runs Tekton's remote resolvers (cmd/resolvers) as a host process beside
// Tekton's controller. Both serve knative's health probes on port 8080, hard-coded in
// knative.dev/pkg/injection/sharedmain; in a cluster each has its own Pod network, here podnet
// gives the resolvers one. Inside it, loopback is up and the forwarded address listens on
// loopback, so the same kubeconfig (server https://127.0.0.1:<port>, whose certificate names
// 127.0.0.1) reaches the real API server; nothing else of the host's network is reachable.
//
// How: the main goroutine is locked to its OS thread, and only that thread unshares its network
// namespace (CLONE_NEWNET applies to the calling thread). The forwarded address's listener is
// created on that thread, so it listens inside the new namespace; the child is forked from that
// thread, so it starts inside it too. Connections to the host are dialled from other goroutines,
// which run on threads that stayed in the host's namespace (the Go runtime starts new threads
// from a clean template thread while a thread is locked). Needs CAP_SYS_ADMIN (root).
//
// SIGTERM and SIGINT are passed on to the child; podnet exits with the child's exit status. The
// child gets SIGKILL if podnet dies.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

func init() {
	// Before main runs: main's goroutine keeps this thread, the one that leaves the host's
	// network namespace.
	runtime.LockOSThread()
}

func main() {
	forward := flag.String("forward", "", "host TCP address (ip:port) to make reachable at the same address inside")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s --forward ip:port -- command [args...]\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if *forward == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	log.SetPrefix("podnet: ")
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)

	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		log.Fatalf("unshare(CLONE_NEWNET): %v (needs root)", err)
	}
	if err := loopbackUp(); err != nil {
		log.Fatalf("bring up lo: %v", err)
	}
	listener, err := net.Listen("tcp", *forward)
	if err != nil {
		log.Fatalf("listen on %s in the new network namespace: %v", *forward, err)
	}
	go serve(listener, *forward)

	cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	if err := cmd.Start(); err != nil {
		log.Fatalf("start %s: %v", flag.Arg(0), err)
	}
	log.Printf("%s (pid %d) runs in its own network namespace; %s forwarded to the host", flag.Arg(0), cmd.Process.Pid, *forward)
	go func() {
		for s := range signals {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		os.Exit(0)
	case errors.As(err, &exit):
		log.Printf("%s: %v", flag.Arg(0), err)
		if code := exit.ExitCode(); code > 0 {
			os.Exit(code)
		}
		os.Exit(1)
	default:
		log.Fatalf("wait for %s: %v", flag.Arg(0), err)
	}
}

// loopbackUp sets IFF_UP on lo, which a new network namespace has down.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// serve accepts inside the namespace and dials the host: this goroutine and the ones it starts
// are not the locked thread's.
func serve(listener net.Listener, upstream string) {
	for {
		conn, err := listener.Accept()
		if err != nil {
			log.Fatalf("accept: %v", err)
		}
		go func() {
			defer conn.Close()
			host, err := net.Dial("tcp", upstream)
			if err != nil {
				log.Printf("dial %s: %v", upstream, err)
				return
			}
			defer host.Close()
			done := make(chan struct{}, 2)
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				if tcp, ok := dst.(*net.TCPConn); ok {
					_ = tcp.CloseWrite()
				}
				done <- struct{}{}
			}
			go pipe(host, conn)
			go pipe(conn, host)
			<-done
			<-done
		}()
	}
}
