// Package tcpframe carries a byte stream over an OpenShell ForwardTcp
// stream: a net.Conn whose bytes travel as TcpForwardFrame data frames of
// at most [MaxData] bytes. The gateway (relay/gateway) and the client
// (relay/openshell) each wrap their end of the stream with it.
package tcpframe
