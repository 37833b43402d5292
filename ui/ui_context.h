#pragma once
// What every panel reads and writes: the session(s) shown, the cursor, the selection, and
// view settings. Panels draw the state at `cursor`; moving the cursor anywhere moves it
// everywhere.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "sessions/attached_history.h"
#include "sessions/attached_index.h"
#include "sessions/session_reader.h"
#include "sessions/step_costs.h"
#include "sessions/step_ops.h"
#include "sessions/token_divergence.h"
#include "ui/controller.h"
#include "ui/heat_scale.h"
#include "ui/palette.h"

namespace kvscope::ui {

struct ViewState {
    int64_t cursor = 0;
    int32_t selected_request = -1;
    int32_t selected_block = -1;
    int32_t hovered_block = -1;
    // Attention heatmap picks and view (zoom 1 = whole matrix).
    int32_t heat_request = -1;
    int heat_layer = 0, heat_head = 0;
    float heat_zoom = 1.0f, heat_pan_x = 0.0f, heat_pan_y = 0.0f;
    bool heat_picked = false;  // the user chose a layer / head; until then follow the capture
    int heat_hover_q = -1, heat_hover_k = -1;
    HeatScale heat_scale = kDefaultHeatScale;  // how probabilities map onto the colour ramp
    // Timeline zoom: [view_lo, view_hi] steps; view_hi < 0 shows everything.
    int64_t view_lo = 0, view_hi = -1;
    bool playing = false;
    float steps_per_second = 8.0f;
    int run_n = 10;
    float font_scale = 1.0f;
    PaletteKind palette = PaletteKind::kOkabeIto;
    bool show_help = false;
    bool follow_live = true;  // the cursor tracks the newest step of a live run
    std::string message;      // one line at the bottom: hints, errors
    bool message_is_error = false;
    std::string eviction_filter;
    int compare_align = 0;  // 0: same step; 1: same progress of the selected request
    // Kernels panel: the part of the step shown (zoom 1 = all of it), from `kern_pan` (0..1).
    float kern_zoom = 1.0f, kern_pan = 0.0f;
    bool kern_roofline = false;  // the roofline chart instead of the table under the lane
    // Attached deployments: the Deployment panel's search (a hash prefix or token ids) and the
    // prefix tree picked in the Prefix trees panel (its blocks outlined in the block maps).
    std::string deploy_search;
    int32_t selected_tree = -1;
};

// Which of the shown runs a panel draws: the main one (selection, hover and the cursor live
// there) or, in a comparison, the second one at the aligned step. Requests are matched between
// the two by name, since a request's index differs from run to run.
enum class Side { kMain, kCompared };

// Simulated input for scripted tests: a hover over the heatmap or a block at a cell.
struct ScriptedInput {
    int hover_block = -1;
    int hover_q = -1, hover_k = -1;
};

class UiContext {
  public:
    ViewState view;
    ScriptedInput scripted;
    std::unique_ptr<SessionReader> owned_session;  // replay
    SessionReader* session = nullptr;              // what is shown (owned or the controller's)
    std::unique_ptr<SessionReader> compare;        // second session, for Compare
    Controller* controller = nullptr;              // live runs only
    const TimelineState* state = nullptr;          // state at view.cursor, refreshed each frame
    // Compare: the second session's state at compare_step, the step aligned with the cursor
    // (the same step, or where the selected request got as far: view.compare_align).
    const TimelineState* compare_state = nullptr;
    int64_t compare_step = -1;
    std::string compare_note;  // how compare_step was found, or why there is none
    std::string title;

    const TimelineState* state_of(Side side) const {
        return side == Side::kMain ? state : compare_state;
    }
    SessionReader* session_of(Side side) const {
        return side == Side::kMain ? session : compare.get();
    }
    int64_t cursor_of(Side side) const { return side == Side::kMain ? view.cursor : compare_step; }
    // A request of the main run (an index there) as an index of `side`'s run, or -1.
    int32_t request_in(Side side, int32_t main_request) const;
    // The selected request as an index of `side`'s run (matched by name), or -1.
    int32_t selected_request_in(Side side) const { return request_in(side, view.selected_request); }
    // Selects the request called `name` in the main run (a click on either side).
    void select_request_named(const std::string& name);

    // Switches to a recording, at its opening step (opening_step()); on failure keeps what was
    // shown and puts the error on screen.
    bool open_session(const std::string& path);
    bool open_compare(const std::string& path);
    // Refreshes `state` for the cursor; errors go to the message line.
    void update_state();
    int64_t last_step() const { return session ? session->last_step() : -1; }
    void set_cursor(int64_t step);
    // True while a live run has not run its first step (state is then the empty pool).
    bool before_first_step() const { return session && session->last_step() < 0; }

    // A live run's requests that have not arrived yet (asked of the controller once per step).
    const std::vector<PendingRequest>& pending_requests();

    // What the status bar and the Controls panel both say, so they never disagree.
    std::string run_status();
    // The texts as last drawn (the --script `dump` command reports them).
    std::string drawn_status_bar, drawn_controls_status;
    // The attached publishers' notes the Controls panel listed (dump's controls_notes).
    std::vector<std::string> drawn_controls_notes;
    // Where the heatmap was last drawn, in window pixels (the `dump` command reports it): the
    // map's square, the policy's strip above it (strip_h 0 without one), and the keys shown.
    struct HeatmapGeometry {
        float x = 0, y = 0, side = 0, strip_y = 0, strip_h = 0;
        int keys = 0;
        float pan_x = 0, span = 0;
    } drawn_heatmap[2];  // [Side]
    // Rows the Evictions panel last listed (after its filters), and of them token evictions; the
    // first row's text (the `dump` command reports them).
    size_t drawn_log_rows = 0, drawn_log_token_evictions = 0;
    std::string drawn_log_first_row;
    // Tracks the Memory panel last drew.
    int drawn_memory_tracks = 0;
    // What the Kernels panel last drew: the step, its ops, the canvas and the widest op's box
    // (window pixels) and colour, so a test can find it on screen.
    struct KernelsGeometry {
        int64_t step = -1;
        int ops = 0;
        float x = 0, y = 0, w = 0, h = 0;
        std::string widest;
        float widest_x0 = 0, widest_x1 = 0, widest_y0 = 0, widest_y1 = 0;
        uint32_t widest_color = 0;
        int roofline_points = 0;  // op kinds placed on the roofline chart (when it is shown)
        int gpu_kernels = 0, gpu_streams = 0, hbm_samples = 0;  // a GPU's rows, when traced
        double hbm_peak_gbps = 0;
    } drawn_kernels;

    // An attached deployment (RunInfo::publishers not empty: `kvscope attach`), whose blocks the
    // Deployment and Prefix trees panels draw instead of requests, kernels and attention.
    bool attached() const { return session && !session->info().publishers.empty(); }
    // The main state's blocks as prefix trees, built once per state shown (not per frame).
    const AttachedIndex& attached_index();
    // What view.deploy_search finds in attached_index() (searched again when either changes).
    const AttachedQuery& attached_query();
    const AttachedMatch& attached_match();
    // Per publisher and medium, the blocks held at every step (the attach/<p>/<MEDIUM> metric
    // events), read once and extended as the session grows. A medium a step does not name held
    // nothing then (the attacher leaves out media holding nothing).
    struct AttachedSeries {
        std::string label;
        int32_t publisher = 0;
        KvMedium medium = KvMedium::kGpu;
        std::vector<float> values;  // one per attached_steps() entry
    };
    const std::vector<int64_t>& attached_steps();
    const std::vector<AttachedSeries>& attached_series();
    // The same steps' sums: per medium over every publisher, then per publisher over every
    // medium (medium kOther, label "rank P"), worked out again when the series grow.
    const std::vector<AttachedSeries>& attached_totals();
    // Blocks stored and gone per step, and every block gone with its age (the kv_* events, read
    // once and extended as the session grows): the Memory and Evictions panels' rows.
    const AttachedHistory& attached_history();
    // What the Deployment panel last drew (the `dump` command reports it).
    struct DeploymentGeometry {
        bool shown = false;
        int publishers = 0, held = 0, trees = 0, hot = 0, tracks = 0;
        std::string search_summary;
        std::vector<int32_t> search_blocks;                // capped at 1000
        std::vector<int32_t> search_blocks_per_publisher;  // per publisher
        int32_t hovered_block = -1;
        std::string tooltip;  // the hovered block's tooltip, one line per row
        // One map per publisher, or per publisher and cache group where it holds blocks of
        // several (vLLM's hybrid cache: full attention apart from sliding window): their labels.
        std::vector<std::string> maps;
    } drawn_deployment;

    // The step summary at `side`'s cursor, or null when that step has no row (an idle gap).
    const StepSummary* step_summary(Side side = Side::kMain) const;
    // What `side`'s step at its cursor ran, read once per step: its ops (kernel events) on the
    // host and on a GPU's streams, and the GPU's DRAM samples (hbm_sample events).
    struct StepWork {
        std::vector<OpRecord> host, gpu;
        std::vector<HbmSampleRecord> hbm;
    };
    const StepWork& step_work(Side side = Side::kMain);

    // Of `side`'s run (request indices are that run's):
    // Eviction and preemption log of the whole run (token evictions and compaction moves
    // included; loaded lazily, extended as it grows).
    const std::vector<Event>& eviction_log(Side side = Side::kMain);
    // (layer, head) pairs with captured rows; while none are known, asked again when the
    // session grows (a live run).
    const std::vector<std::pair<int32_t, int32_t>>& captured_heads(Side side = Side::kMain);
    // Attention rows of (request, layer, head) in step order, read at least up to the side's
    // cursor and kept: rows recorded after it may be included, so skip those with a later step.
    const std::vector<AttentionRow>& attention_rows(int32_t request, int layer, int head,
                                                    Side side = Side::kMain);

    // Compare: where the two runs' tokens part, per request both ran (read once per pair of
    // runs, again when either grows).
    const std::vector<TokenDivergence>& divergences();
    // Compare: each step's flops and time in both runs and their ratios (read as divergences()
    // is: once per pair of runs, again when either grows).
    const CostComparison& costs();
    // The main run's flops per step (its kernel events: the step row keeps bytes only), read as
    // the run grows, steps and MFLOP side by side as plot_series takes them.
    struct FlopsSeries {
        std::vector<int64_t> steps;
        std::vector<float> mflops;
    };
    const FlopsSeries& step_flops();

  private:
    void update_compare_state();
    // attached_index() and attached_match(), and the key they were made for.
    struct AttachedCache {
        std::tuple<SessionReader*, int64_t, uint64_t, size_t> key{nullptr, -2, 0, 0};
        AttachedIndex index;
        std::string searched = "\x01";  // nothing searched yet
        uint64_t searched_build = 0, build = 0;
        AttachedQuery query;
        AttachedMatch match;
        SessionReader* series_of = nullptr;
        int64_t series_upto = -1;
        std::vector<int64_t> steps;
        std::vector<AttachedSeries> series;
        std::vector<AttachedSeries> totals;
        SessionReader* totals_of = nullptr;
        int64_t totals_upto = -2;
        SessionReader* history_of = nullptr;
        int64_t history_upto = -1;
        std::optional<AttachedHistory> history;
    } attached_;
    std::tuple<SessionReader*, SessionReader*, int64_t, int64_t> divergence_key_{nullptr, nullptr,
                                                                                 -1, -1};
    std::vector<TokenDivergence> divergences_;
    std::tuple<SessionReader*, SessionReader*, int64_t, int64_t> costs_key_{nullptr, nullptr, -1,
                                                                            -1};
    CostComparison costs_;
    FlopsSeries flops_;
    SessionReader* flops_of_ = nullptr;
    int64_t flops_upto_ = -1;
    std::optional<TimelineState> empty_state_;  // the pool before the first step
    std::tuple<SessionReader*, int64_t, int32_t> aligned_key_{nullptr, -1, -1};
    int64_t aligned_step_ = -1;
    SessionReader* empty_of_ = nullptr;
    std::vector<PendingRequest> pending_;
    int64_t pending_upto_ = -2;
    Controller* pending_of_ = nullptr;
    // What is read of one run and kept between frames, per Side.
    struct RunCache {
        std::vector<Event> evictions;
        int64_t evictions_upto = -1;
        SessionReader* evictions_of = nullptr;
        std::tuple<SessionReader*, int32_t, int, int> attention_key{nullptr, -1, -1, -1};
        std::vector<AttentionRow> attention;
        int64_t attention_upto = -1;
        SessionReader* captured_of = nullptr;
        std::vector<std::pair<int32_t, int32_t>> captured;
        int64_t captured_upto = -2;  // last step of the session when captured was asked for
        // (run, step, the run's last step when read): a step read before it was written (a live
        // run's cursor ahead of the recorder) is read again once the run has grown, not per frame.
        std::tuple<SessionReader*, int64_t, int64_t> ops_key{nullptr, -1, -2};
        StepWork work;
    } runs_[2];
};

// Where a recording opens: --step aside, the first step with captured attention (a capture is
// opened to see it), else the step with the most requests running (not the last, where every
// request has finished and the pool holds only the cache).
int64_t opening_step(SessionReader& session);

// Greyed text that wraps at the panel's edge instead of running past it.
void text_disabled_wrapped(const std::string& text);
// SameLine() when an item `width` wide still fits on the current line; else a new line. Rows of
// checkboxes and buttons flow onto more lines in a narrow panel rather than being cut off.
void same_line_if_fits(float width);

// One function per panel (one file each).
void draw_controls_panel(UiContext& ctx);
void draw_block_pool_panel(UiContext& ctx, Side side = Side::kMain);
void draw_requests_panel(UiContext& ctx, Side side = Side::kMain);
void draw_heatmap_panel(UiContext& ctx, Side side = Side::kMain);
void draw_eviction_log_panel(UiContext& ctx);
void draw_kernels_panel(UiContext& ctx);
void draw_timeline_panel(UiContext& ctx);
void draw_memory_panel(UiContext& ctx);
void draw_compare_panel(UiContext& ctx);
void draw_deployment_panel(UiContext& ctx);
void draw_prefix_tree_panel(UiContext& ctx);
void draw_help_overlay(UiContext& ctx);

}  // namespace kvscope::ui
