package main

import (
	"encoding"
	"encoding/json"
	"reflect"
)

// --json prints an empty collection as [] or {}, never null (issue 36: `meshd status --json` on a
// client printed null for nodes, voters and gossip.rejected, and scripts iterating them broke):
// emit passes each answer through emptied before encoding it, so no view need remember to make
// its slices and maps.

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// emptied is a copy of v whose nil slices and maps, wherever reached through exported fields,
// pointers, slices, maps and interfaces, are empty ones; a value that marshals itself is kept
// as it is.
func emptied(v any) any {
	if v == nil {
		return nil
	}
	return emptiedValue(reflect.ValueOf(v)).Interface()
}

func emptiedValue(v reflect.Value) reflect.Value {
	t := v.Type()
	if pt := reflect.PointerTo(t); pt.Implements(jsonMarshaler) || pt.Implements(textMarshaler) {
		return v
	}
	switch t.Kind() {
	case reflect.Slice:
		if v.IsNil() {
			return reflect.MakeSlice(t, 0, 0)
		}
		out := reflect.MakeSlice(t, v.Len(), v.Len())
		for i := range v.Len() {
			out.Index(i).Set(emptiedValue(v.Index(i)))
		}
		return out
	case reflect.Map:
		if v.IsNil() {
			return reflect.MakeMap(t)
		}
		out := reflect.MakeMapWithSize(t, v.Len())
		for it := v.MapRange(); it.Next(); {
			out.SetMapIndex(it.Key(), emptiedValue(it.Value()))
		}
		return out
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		out := reflect.New(t.Elem())
		out.Elem().Set(emptiedValue(v.Elem()))
		return out
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		out := reflect.New(t).Elem()
		out.Set(emptiedValue(v.Elem()))
		return out
	case reflect.Struct:
		out := reflect.New(t).Elem()
		out.Set(v)
		for i := range t.NumField() {
			if f := out.Field(i); f.CanSet() {
				f.Set(emptiedValue(v.Field(i)))
			}
		}
		return out
	}
	return v
}
