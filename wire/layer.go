package wire

import (
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// LayerTypeNetdir is netdir's gopacket layer type, decoded from UDP payloads on
// ServicePort, so that gopacket and pcapgo read and write netdir captures.
var LayerTypeNetdir = gopacket.RegisterLayerType(7420, gopacket.LayerTypeMetadata{
	Name:    "Netdir",
	Decoder: gopacket.DecodeFunc(decodeNetdir),
})

func init() {
	layers.RegisterUDPPortLayerType(layers.UDPPort(ServicePort), LayerTypeNetdir)
}

// Layer is a netdir packet as a gopacket layer.
type Layer struct {
	layers.BaseLayer
	Packet
}

// LayerType implements gopacket.Layer.
func (l *Layer) LayerType() gopacket.LayerType { return LayerTypeNetdir }

// CanDecode implements gopacket.DecodingLayer.
func (l *Layer) CanDecode() gopacket.LayerClass { return LayerTypeNetdir }

// NextLayerType implements gopacket.DecodingLayer: nothing follows.
func (l *Layer) NextLayerType() gopacket.LayerType { return gopacket.LayerTypeZero }

// DecodeFromBytes implements gopacket.DecodingLayer.
func (l *Layer) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if err := l.Packet.Decode(data); err != nil {
		df.SetTruncated()
		return err
	}
	l.BaseLayer = layers.BaseLayer{Contents: data}
	return nil
}

// SerializeTo implements gopacket.SerializableLayer.
func (l *Layer) SerializeTo(b gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	buf, err := b.PrependBytes(l.Packet.Len())
	if err != nil {
		return err
	}
	_, err = l.Packet.Encode(buf)
	return err
}

func decodeNetdir(data []byte, p gopacket.PacketBuilder) error {
	l := &Layer{}
	if err := l.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(l)
	p.SetApplicationLayer(l)
	return nil
}

// Payload implements gopacket.ApplicationLayer: the key and value.
func (l *Layer) Payload() []byte { return l.Contents[PrefixLen:] }
