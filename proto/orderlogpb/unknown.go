package orderlogpb

// Hand-written, beside the generated code: the fields a decoder did not
// know, read straight from the generated structs. The encoders in
// producewire ask for them on every message of a read page, and the
// protobuf runtime's ProtoReflect().GetUnknown() took 8 % of a node's CPU
// in a range read.

// UnknownFields returns x's unknown fields (nil for a nil x).
func (x *Message) UnknownFields() []byte {
	if x == nil {
		return nil
	}
	return x.unknownFields
}

// UnknownFields returns x's unknown fields (nil for a nil x).
func (x *Header) UnknownFields() []byte {
	if x == nil {
		return nil
	}
	return x.unknownFields
}

// UnknownFields returns x's unknown fields (nil for a nil x).
func (x *StoredMessage) UnknownFields() []byte {
	if x == nil {
		return nil
	}
	return x.unknownFields
}

// UnknownFields returns x's unknown fields (nil for a nil x).
func (x *SkippedRange) UnknownFields() []byte {
	if x == nil {
		return nil
	}
	return x.unknownFields
}

// UnknownFields returns x's unknown fields (nil for a nil x).
func (x *ReadResponse) UnknownFields() []byte {
	if x == nil {
		return nil
	}
	return x.unknownFields
}

// UnknownFields returns x's unknown fields (nil for a nil x).
func (x *ProduceRequest) UnknownFields() []byte {
	if x == nil {
		return nil
	}
	return x.unknownFields
}

// UnknownFields returns x's unknown fields (nil for a nil x).
func (x *ProduceResponse) UnknownFields() []byte {
	if x == nil {
		return nil
	}
	return x.unknownFields
}

// UnknownFields returns x's unknown fields (nil for a nil x).
func (x *Ack) UnknownFields() []byte {
	if x == nil {
		return nil
	}
	return x.unknownFields
}
