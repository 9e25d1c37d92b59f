//! Output VC ownership: in wormhole and virtual cut-through switching an
//! output VC carries one packet at a time, from the head's VC allocation
//! until its tail leaves (BookSim2's `OutputSet`/VC state).

/// Owner (input VC index) of every (output port, VC).
#[derive(Debug)]
pub struct OutputVcs {
    vcs: usize,
    owner: Vec<Option<u32>>,
}

impl OutputVcs {
    pub fn new(radix: usize, vcs: u8) -> Self {
        OutputVcs {
            vcs: vcs as usize,
            owner: vec![None; radix * vcs as usize],
        }
    }

    fn idx(&self, port: usize, vc: u8) -> usize {
        port * self.vcs + vc as usize
    }

    pub fn is_free(&self, port: usize, vc: u8) -> bool {
        self.owner[self.idx(port, vc)].is_none()
    }

    pub fn owner(&self, port: usize, vc: u8) -> Option<u32> {
        self.owner[self.idx(port, vc)]
    }

    pub fn claim(&mut self, port: usize, vc: u8, input: u32) {
        let i = self.idx(port, vc);
        debug_assert!(
            self.owner[i].is_none(),
            "output VC {port}/{vc} claimed twice"
        );
        self.owner[i] = Some(input);
    }

    pub fn release(&mut self, port: usize, vc: u8) {
        let i = self.idx(port, vc);
        self.owner[i] = None;
    }
}
