// Package tftp is Anvil's read-only TFTP server: it hands PXE firmware the
// iPXE binaries (and whatever else the operator puts in the TFTP
// directory) from an fs.FS.
//
// It speaks RFC 1350 (RRQ in octet and netascii mode, netascii translated
// on the fly), option negotiation (RFC 2347) with blksize (RFC 2348),
// timeout and tsize (RFC 2349) and windowsize (RFC 7440). Write requests
// are refused: nothing is ever written. Each transfer runs on its own
// socket (RFC 1350 section 4) in its own goroutine, bounded by
// Config.MaxTransfers; block numbers wrap from 65535 to 0, so files of any
// size are served.
//
// Why our own: windowsize is what makes TFTP fast (a window of 16 or 64
// blocks per acknowledgement instead of one), and no Go library available
// here implements RFC 7440 well — pin/tftp has it only in v3.1.0, and none
// sends a window in a few system calls. This package sends a window with
// UDP segmentation offload or sendmmsg, reading the file through
// io.ReaderAt into a read-ahead cache, and beats the C peers in
// bench/tftp (see docs/tftp.md).
//
// Names are refused, never rewritten, when they are absolute, contain a
// ".." element, a backslash or a control character, or are otherwise not
// a valid fs.FS path; confinement beyond that (symlinks) is the FS's job,
// which os.Root.FS does. A first element that is a MAC address
// ("52:54:00:12:34:56/ipxe.efi" or "52-54-00-12-34-56/ipxe.efi") tags the
// request with that machine and is stripped: "ipxe.efi" is served.
//
// Every request leaves one machinelog.Event (outcome served, not-found,
// refused, error or timeout) — except refusals (refused, not-found) of one
// source address beyond a token-bucket rate limit, which are counted and
// summarized in one Event of outcome suppressed — and the Prometheus metrics
// anvil_tftp_transfers_total{outcome}, anvil_tftp_bytes_total,
// anvil_tftp_retransmits_total, anvil_tftp_active_transfers,
// anvil_tftp_malformed_packets_total and
// anvil_tftp_refusals_suppressed_total.
//
// It owns the TFTP protocol only. It knows nothing of hardware, boot
// policy or stores, and imports no package of this module but
// internal/machinelog (deps_test.go checks it).
package tftp
