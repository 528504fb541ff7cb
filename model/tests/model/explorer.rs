//! The Explorer (`txnsim explore`) labels steps and shows states in txnsim's words, not Debug dumps.

use stateright::Model;
use txnsim_model::{build, Bounds};

#[test]
fn explorer_labels_and_states_are_txnsims_own() {
    let model = build(&Bounds::small());
    let init = model.init_states().into_iter().next().expect("one initial state");
    let mut actions = Vec::new();
    model.actions(&init, &mut actions);
    let first = actions.into_iter().next().expect("the producer can start");
    assert_eq!(model.format_action(&first), "p0 → broker: InitProducerId req tx-p0");
    let view = model.format_step(&init, first).expect("the step is enabled");
    assert_eq!(
        view,
        "p0 → broker: InitProducerId req tx-p0 ⇒ 'tx-p0' Empty e0\n\nt/0 [] HW 0 LSO 0\nt/1 [] HW 0 LSO 0\n\
         'tx-p0' pid 1000 e0 Empty\nrc read t/0 [] t/1 []\nru read t/0 [] t/1 []",
        "the state view: the step, then each partition's log with HW and LSO, the coordinator, the readers"
    );
}
