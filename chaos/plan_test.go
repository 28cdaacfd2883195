package chaos

import (
	"slices"
	"testing"
	"time"
)

// TestPlanFromEnv checks what `make chaos` asks for is what runs: a seed given is replayed, for
// the minutes given or two, and never becomes a soak of fresh seeds.
func TestPlanFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want runPlan
	}{
		{"nothing: the short seeds", nil, runPlan{seeds: shortSeeds, duration: shortDuration}},
		{"a soak", map[string]string{"CHAOS_MINUTES": "10"},
			runPlan{seeds: shortSeeds, duration: 5 * time.Minute, soak: 10 * time.Minute}},
		{"a short soak", map[string]string{"CHAOS_MINUTES": "2"},
			runPlan{seeds: shortSeeds, duration: 2 * time.Minute, soak: 2 * time.Minute}},
		{"a seed", map[string]string{"CHAOS_SEED": "7"},
			runPlan{seeds: []int64{7}, duration: 2 * time.Minute}},
		{"a seed for minutes", map[string]string{"CHAOS_SEED": "7", "CHAOS_MINUTES": "3"},
			runPlan{seeds: []int64{7}, duration: 3 * time.Minute}},
		{"a seed for long", map[string]string{"CHAOS_SEED": "7", "CHAOS_MINUTES": "12"},
			runPlan{seeds: []int64{7}, duration: 12 * time.Minute}},
		{"a seed, its run set",
			map[string]string{"CHAOS_SEED": "7", "CHAOS_MINUTES": "3", "CHAOS_RUN": "90s"},
			runPlan{seeds: []int64{7}, duration: 90 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := planFromEnv(func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.seeds, tc.want.seeds) || got.duration != tc.want.duration ||
				got.soak != tc.want.soak {
				t.Fatalf("plan = %+v, want %+v", got, tc.want)
			}
		})
	}
	for _, env := range []map[string]string{
		{"CHAOS_SEED": "seven"}, {"CHAOS_MINUTES": "0"}, {"CHAOS_MINUTES": "x"}, {"CHAOS_RUN": "2"},
	} {
		if _, err := planFromEnv(func(k string) string { return env[k] }); err == nil {
			t.Errorf("planFromEnv(%v) = nil error, want one", env)
		}
	}
}
