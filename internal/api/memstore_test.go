package api

import (
	"context"
	"errors"
	"sync"

	"github.com/gatehouse-dev/gatehouse/internal/route"
)

// memStore is an interim in-memory Store used until internal/store lands.
type memStore struct {
	mu      sync.Mutex
	apps    map[string]route.App
	domains map[string]route.Domain
	zones   map[string]route.Zone
	records map[string]route.Record
	keys    map[string]route.HostKey
}

var errMemNotFound = errors.New("mem: not found")

func newMemStore() *memStore {
	return &memStore{apps: map[string]route.App{}, domains: map[string]route.Domain{}, zones: map[string]route.Zone{}, records: map[string]route.Record{}, keys: map[string]route.HostKey{}}
}

func get[T any](s *memStore, m map[string]T, k string) (T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := m[k]
	if !ok {
		return v, errMemNotFound
	}
	return v, nil
}
func put[T any](s *memStore, m map[string]T, k string, v T) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m[k] = v
	return nil
}
func del[T any](s *memStore, m map[string]T, k string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := m[k]; !ok {
		return errMemNotFound
	}
	delete(m, k)
	return nil
}
func list[T any](s *memStore, m map[string]T) ([]T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []T
	for _, v := range m {
		out = append(out, v)
	}
	return out, nil
}

func (s *memStore) GetApp(_ context.Context, id string) (route.App, error) { return get(s, s.apps, id) }
func (s *memStore) PutApp(_ context.Context, a route.App) error            { return put(s, s.apps, a.ID, a) }
func (s *memStore) DeleteApp(_ context.Context, id string) error           { return del(s, s.apps, id) }
func (s *memStore) ListApps(context.Context) ([]route.App, error)          { return list(s, s.apps) }
func (s *memStore) GetDomain(_ context.Context, n string) (route.Domain, error) {
	return get(s, s.domains, n)
}
func (s *memStore) PutDomain(_ context.Context, d route.Domain) error {
	return put(s, s.domains, d.Domain, d)
}
func (s *memStore) DeleteDomain(_ context.Context, n string) error { return del(s, s.domains, n) }
func (s *memStore) ListDomains(context.Context) ([]route.Domain, error) {
	return list(s, s.domains)
}
func (s *memStore) GetZone(_ context.Context, n string) (route.Zone, error) {
	return get(s, s.zones, n)
}
func (s *memStore) PutZone(_ context.Context, z route.Zone) error   { return put(s, s.zones, z.Name, z) }
func (s *memStore) DeleteZone(_ context.Context, n string) error    { return del(s, s.zones, n) }
func (s *memStore) ListZones(context.Context) ([]route.Zone, error) { return list(s, s.zones) }
func (s *memStore) PutRecord(_ context.Context, r *route.Record) error {
	return put(s, s.records, r.Zone+" "+r.Name+" "+r.Type, *r)
}
func (s *memStore) DeleteRecord(_ context.Context, z, n, t string) error {
	return del(s, s.records, z+" "+n+" "+t)
}
func (s *memStore) ListRecords(_ context.Context, z string) ([]route.Record, error) {
	all, _ := list(s, s.records)
	var out []route.Record
	for _, r := range all {
		if r.Zone == z {
			out = append(out, r)
		}
	}
	return out, nil
}
func (s *memStore) GetHostKey(_ context.Context, id string) (route.HostKey, error) {
	return get(s, s.keys, id)
}
func (s *memStore) PutHostKey(_ context.Context, k route.HostKey) error {
	return put(s, s.keys, k.HostID, k)
}
func (s *memStore) DeleteHostKey(_ context.Context, id string) error { return del(s, s.keys, id) }
func (s *memStore) ListHostKeys(context.Context) ([]route.HostKey, error) {
	return list(s, s.keys)
}
